"""The asyncio client against one real broker, whose routes name a counting proxy in front of it.

Each test drives its coroutine with ``asyncio.run``. The broker advertises the proxy's address, so
every produce, pull and subscribe the clients make after the route lookup passes through it; the
proxy can hold each answer back and counts connections and requests in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from wharf_client import (
    AsyncConsumer,
    AsyncProducer,
    AsyncSubscriber,
    BrokerError,
    ConsumedMessage,
    OutgoingMessage,
    SendResult,
    WharfClientError,
)
from wharf_client.aio import OrderedLines
from wharf_client.sharding import queue_for_key

from tests.api.server import BrokerProcess
from tests.client.test_end_to_end import DeadBroker

T = TypeVar("T")
MAX_UNACKED = 6  # the broker's: a group subscriber gets nothing new while 6 wait for an ack
_names = itertools.count()


class CountingProxy:
    """A TCP proxy to ``127.0.0.1:target_port`` on its own event loop thread. A connection is busy
    from a request's first bytes to its answer's; ``answer_delay_s`` holds each answer back."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.answer_delay_s = 0.0
        self.connections = 0
        self.busy = 0
        self.max_busy = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self.loop
        ).result()
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def reset(self, answer_delay_s: float = 0.0) -> None:
        self.answer_delay_s = answer_delay_s
        self.connections = self.max_busy = 0

    def close(self) -> None:
        async def stop() -> None:
            self.server.close()
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        busy = False

        async def requests() -> None:
            nonlocal busy
            while data := await client_reader.read(65536):
                if not busy:
                    busy = True
                    self.busy += 1
                    self.max_busy = max(self.max_busy, self.busy)
                broker_writer.write(data)
                await broker_writer.drain()

        async def answers() -> None:
            nonlocal busy
            while data := await broker_reader.read(65536):
                if busy:
                    await asyncio.sleep(self.answer_delay_s)
                    busy = False
                    self.busy -= 1
                client_writer.write(data)
                await client_writer.drain()

        try:
            broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        pipes = [asyncio.ensure_future(requests()), asyncio.ensure_future(answers())]
        try:
            # Either side hanging up (or failing) ends both.
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            for writer in (client_writer, broker_writer):
                writer.close()
            if busy:
                self.busy -= 1


@pytest.fixture(scope="module")
def proxy_and_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[CountingProxy, BrokerProcess]]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("aio") / "store", hold_check_interval_ms=60_000, ws_max_unacked=MAX_UNACKED
    )
    proxy = CountingProxy(process.port)
    process.env["WHARF_ADVERTISED_URL"] = proxy.url
    process.start()
    yield proxy, process
    process.stop()
    proxy.close()


@pytest.fixture(autouse=True)
def proxy(proxy_and_broker: tuple[CountingProxy, BrokerProcess]) -> CountingProxy:
    """The proxy, counting from zero and holding nothing back, for every test."""
    proxy_and_broker[0].reset()
    return proxy_and_broker[0]


@pytest.fixture
def broker(proxy_and_broker: tuple[CountingProxy, BrokerProcess]) -> BrokerProcess:
    return proxy_and_broker[1]


def new_topic(broker: BrokerProcess, queues: int) -> str:
    name = f"aio-{next(_names)}"
    response = httpx.post(f"{broker.url}/v1/topics", json={"name": name, "queues": queues})
    assert response.status_code == 201, response.text
    return name


def run(coroutine: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
    return asyncio.run(asyncio.wait_for(coroutine, timeout_s))


async def take(
    poll: Callable[[float], Awaitable[ConsumedMessage | None]], count: int
) -> list[ConsumedMessage]:
    """``count`` messages from ``poll``, failing after 20 s without one."""
    taken: list[ConsumedMessage] = []
    while len(taken) < count:
        message = await poll(20.0)
        assert message is not None, f"only {len(taken)} of {count} messages came"
        taken.append(message)
    return taken


def stored_bodies(broker: BrokerProcess, topic: str, queue_id: int) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        page = httpx.get(
            f"{broker.url}/v1/topics/{topic}/queues/{queue_id}/messages",
            params={"offset": len(bodies), "max_messages": 1000, "max_wait_ms": 0},
        ).json()
        if not page["messages"]:
            return bodies
        bodies += [message["body"].encode() for message in page["messages"]]


def committed(broker: BrokerProcess, group: str, topic: str) -> dict[int, int | None]:
    rows = httpx.get(f"{broker.url}/v1/groups/{group}/offsets", params={"topic": topic}).json()["offsets"]
    return {row["queue_id"]: row["committed_offset"] for row in rows}


# -- ordered lines -------------------------------------------------------------------------------


def test_a_turn_waits_for_every_earlier_turn_of_its_key_only() -> None:
    async def scenario() -> list[str]:
        lines: OrderedLines[str] = OrderedLines()
        done: list[str] = []

        async def hold(name: str, key: str, seconds: float) -> None:
            turn = lines.take(key)
            try:
                await turn.wait()
                await asyncio.sleep(seconds)
                done.append(name)
            finally:
                turn.end()

        first = asyncio.ensure_future(hold("a1", "a", 0.2))
        cancelled = asyncio.ensure_future(hold("a2", "a", 0))
        third = asyncio.ensure_future(hold("a3", "a", 0))
        other = asyncio.ensure_future(hold("b1", "b", 0))
        await asyncio.sleep(0.05)
        cancelled.cancel()  # ends its turn while a1 still runs: a3 must go on waiting for a1
        await asyncio.gather(first, third, other, return_exceptions=True)
        assert len(lines) == 0
        return done

    assert run(scenario()) == ["b1", "a1", "a3"]


# -- producer ------------------------------------------------------------------------------------


def test_produce_and_consume_every_message_once(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 4)

    async def scenario() -> tuple[list[SendResult], list[ConsumedMessage]]:
        async with AsyncProducer(broker.url) as producer:
            sent = await asyncio.gather(
                *(
                    producer.send(topic, f"m{i}", tags="T", keys=[f"k{i}"], properties={"n": str(i)})
                    for i in range(20)
                )
            )
            sent += await producer.send_batch(topic, [OutgoingMessage(f"b{i}".encode()) for i in range(20)])
        async with AsyncConsumer(broker.url, topic, "readers", max_wait_ms=300, start="first") as consumer:
            consumed = await take(consumer.poll, 40)
            assert await consumer.poll(0.5) is None
        return sent, consumed

    sent, consumed = run(scenario())
    assert {result.queue_id for result in sent} == {0, 1, 2, 3}
    assert sorted(message.body for message in consumed) == sorted(
        [f"m{i}".encode() for i in range(20)] + [f"b{i}".encode() for i in range(20)]
    )
    by_body = {message.body: message.message for message in consumed}
    assert (by_body[b"m7"].tags, by_body[b"m7"].keys, by_body[b"m7"].properties["n"]) == ("T", "k7", "7")
    assert {result.unique_id for result in sent} == {message.message.unique_id for message in consumed}


@pytest.mark.parametrize("pipeline", [False, True], ids=["http", "pipelined socket"])
def test_batches_for_one_queue_are_stored_in_the_order_they_were_sent(
    broker: BrokerProcess, pipeline: bool
) -> None:
    """Big and tiny batches alternate, eight in flight: a tiny batch would overtake the big one
    posted just before it, were it not for the queue's line (over HTTP) or the one socket the
    batches go down in order (pipelined)."""
    topic = new_topic(broker, 4)
    sizes = [300 if call % 2 == 0 else 1 for call in range(24)]

    async def scenario() -> list[list[SendResult]]:
        async with AsyncProducer(broker.url, max_in_flight=8, pipeline=pipeline) as producer:
            return await asyncio.gather(
                *(
                    producer.send_batch(
                        topic,
                        [OutgoingMessage(f"{call}:{i}:".encode().ljust(1024, b".")) for i in range(size)],
                        sharding_key="order-7",
                    )
                    for call, size in enumerate(sizes)
                )
            )

    results = run(scenario())
    (queue_id,) = {result.queue_id for batch in results for result in batch}
    stored_calls = [int(body.split(b":")[0]) for body in stored_bodies(broker, topic, queue_id)]
    assert stored_calls == [call for call, size in enumerate(sizes) for _ in range(size)]


def test_batches_for_different_queues_are_in_flight_together_up_to_the_bound(
    broker: BrokerProcess, proxy: CountingProxy
) -> None:
    """Answers held 0.3 s: twelve batches round robin over four queues post three at a time, over
    no more connections than that; twelve for one queue post one after another."""
    topic = new_topic(broker, 4)
    proxy.reset(answer_delay_s=0.3)

    async def scenario(sharding_key: str | None) -> None:
        async with AsyncProducer(broker.url, max_in_flight=3) as producer:
            batches = [[OutgoingMessage(f"{i}".encode())] for i in range(12)]
            await asyncio.gather(*(producer.send_batch(topic, b, sharding_key=sharding_key) for b in batches))

    run(scenario(None))
    assert (proxy.max_busy, proxy.connections) == (3, 3)
    proxy.reset(answer_delay_s=0.3)
    run(scenario("one-key"))
    assert (proxy.max_busy, proxy.connections) == (1, 1)


def test_a_pipelined_producer_has_several_batches_of_one_queue_unanswered_at_once(
    broker: BrokerProcess, proxy: CountingProxy
) -> None:
    """Answers held 0.3 s: twelve batches for one queue take twelve holds over HTTP (one at a
    time), and about one when they go down one socket without waiting for their answers."""
    topic = new_topic(broker, 2)

    async def scenario(pipeline: bool) -> float:
        async with AsyncProducer(broker.url, max_in_flight=12, pipeline=pipeline) as producer:
            await producer.send(topic, "open the connection first", sharding_key="one-key")
            proxy.reset(answer_delay_s=0.3)
            started = time.monotonic()
            batches = [[OutgoingMessage(f"{i}".encode())] for i in range(12)]
            results = await asyncio.gather(
                *(producer.send_batch(topic, batch, sharding_key="one-key") for batch in batches)
            )
            assert all(result.status == "SEND_OK" for batch in results for result in batch)
            return time.monotonic() - started

    one_at_a_time = run(scenario(False))
    pipelined = run(scenario(True))
    assert one_at_a_time >= 12 * 0.3
    assert pipelined < one_at_a_time / 3, (pipelined, one_at_a_time)


def test_closing_the_producer_waits_for_the_batches_sent(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 2)

    async def scenario() -> list[SendResult]:
        async with AsyncProducer(broker.url) as producer:
            sent = [producer.send(topic, f"d{i}") for i in range(10)]  # none awaited
        return await asyncio.gather(*sent)

    assert len(run(scenario())) == 10
    assert sorted(stored_bodies(broker, topic, 0) + stored_bodies(broker, topic, 1)) == sorted(
        f"d{i}".encode() for i in range(10)
    )


def test_a_send_retries_on_another_broker_after_a_failure(broker: BrokerProcess) -> None:
    """A dead broker in the route costs one failed try: the sends land on the live broker and,
    while the (stale) route still lists the dead one, avoid it."""
    topic = new_topic(broker, 2)
    dead = DeadBroker()

    async def scenario() -> tuple[AsyncProducer, list[SendResult], str]:
        async with AsyncProducer(broker.url) as producer:
            live = await producer.routes.get(topic)
            dead_queue = type(live.write_queues[0])("broker-dead", 0, dead.url)
            stale = type(live)(topic, (dead_queue, *live.write_queues), live.read_queues)

            async def stale_route(topic: str, refresh: bool = False) -> Any:
                return stale

            producer.routes.get = stale_route  # type: ignore[method-assign]
            results = [await producer.send(topic, f"x{i}") for i in range(6)]
        return producer, results, live.write_queues[0].broker_name

    try:
        producer, results, live_name = run(scenario())
    finally:
        dead.close()
    assert {result.broker_name for result in results} == {live_name}
    assert dead.connections == 1
    assert not producer.faults.available("broker-dead")
    assert sorted(stored_bodies(broker, topic, 0) + stored_bodies(broker, topic, 1)) == sorted(
        f"x{i}".encode() for i in range(6)
    )


def test_a_sharding_key_waits_for_its_queues_master_instead_of_moving_to_another_broker_name(
    broker: BrokerProcess,
) -> None:
    """A broker name whose master is down (its slaves still registered) keeps its queues in the
    route: a key mapped there fails to send, rather than going to another name's queue and so
    overtaking its own earlier messages once that master is back."""
    topic = new_topic(broker, 1)

    async def scenario() -> tuple[list[SendResult], str]:
        async with AsyncProducer(broker.url, retries=1) as producer:
            live = await producer.routes.get(topic)
            (queue,) = live.write_queues
            orphan = type(queue)("zz-no-master", 0, "")
            route = type(live)(topic, live.write_queues, live.read_queues, live.brokers, (queue, orphan))

            async def route_without_a_master(topic: str, refresh: bool = False) -> Any:
                return route

            producer.routes.get = route_without_a_master  # type: ignore[method-assign]
            keys = [f"key-{n}" for n in range(20)]
            waiting = next(key for key in keys if queue_for_key(key, 2) == 1)
            with pytest.raises(WharfClientError, match="zz-no-master has no master now"):
                await producer.send(topic, "must not move", sharding_key=waiting)
            placed = next(key for key in keys if queue_for_key(key, 2) == 0)
            results = [
                await producer.send(topic, "keyed", sharding_key=placed),
                await producer.send(topic, "free"),
            ]
        return results, queue.broker_name

    results, live_name = run(scenario())
    assert {result.broker_name for result in results} == {live_name}
    assert stored_bodies(broker, topic, 0) == [b"keyed", b"free"]


def test_a_refused_batch_is_raised_not_retried(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 1)

    async def scenario() -> None:
        async with AsyncProducer(broker.url) as producer:
            await producer.send_batch(topic, [OutgoingMessage(b"")])

    with pytest.raises(BrokerError) as refused:
        run(scenario())
    assert (refused.value.status, refused.value.error_code) == (400, 40006)
    with pytest.raises(WharfClientError, match="no writable queue 5"):
        run(_send_to_queue(broker.url, topic, 5))


async def _send_to_queue(url: str, topic: str, queue_id: int) -> None:
    async with AsyncProducer(url) as producer:
        await producer.send_batch(topic, [OutgoingMessage(b"x")], queue_id=queue_id)


# -- pull consumer -------------------------------------------------------------------------------


def test_a_restarted_consumer_resumes_after_what_it_finished(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 1)
    bodies = [f"r{i}".encode() for i in range(12)]

    async def scenario() -> tuple[list[bytes], list[bytes], list[bytes]]:
        async with AsyncProducer(broker.url) as producer:
            await producer.send_batch(topic, [OutgoingMessage(body) for body in bodies])
        async with AsyncConsumer(broker.url, topic, "g1", max_wait_ms=300) as consumer:
            first = [m.body for m in await take(consumer.poll, 4)]
            await consumer.commit(strict=True)  # the application is done with all four

        # Committing as it goes, then dying with r7 in hand: r7 was never finished, so it comes again.
        crashed = await AsyncConsumer(broker.url, topic, "g1", max_wait_ms=300, commit_interval_s=0).start()
        second = [m.body for m in await take(crashed.poll, 4)]
        for task in crashed._fetchers.values():  # the process dies: no close, no last commit
            task.cancel()
        await crashed.http.aclose()

        async with AsyncConsumer(broker.url, topic, "g1", max_wait_ms=300) as consumer:
            rest = [m.body async for m in _first(consumer, 5)]
        return first, second, rest

    first, second, rest = run(scenario())
    assert (first, second, rest) == (bodies[:4], bodies[4:8], bodies[7:])
    assert committed(broker, "g1", topic) == {0: 12}  # the last consumer committed at close


def test_a_batch_poll_hands_out_what_is_waiting_and_the_next_poll_finishes_all_of_it(
    broker: BrokerProcess,
) -> None:
    topic = new_topic(broker, 1)
    bodies = [f"b{i}".encode() for i in range(30)]

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        async with AsyncProducer(broker.url) as producer:
            await producer.send_batch(topic, [OutgoingMessage(body) for body in bodies])
        taken: list[bytes] = []
        async with AsyncConsumer(broker.url, topic, "batched", max_wait_ms=300, start="first") as consumer:
            while len(taken) < len(bodies):
                batch = await consumer.poll_batch(8, timeout_s=20.0)
                assert 1 <= len(batch) <= 8, batch
                taken += [message.body for message in batch]
            assert await consumer.poll_batch(8, timeout_s=0.5) == []  # finishes the last batch
            await consumer.commit(strict=True)
        async with AsyncConsumer(broker.url, topic, "batched", max_wait_ms=300) as consumer:
            later = [message.body for message in await consumer.poll_batch(8, timeout_s=0.5)]
        return taken, later

    taken, later = run(scenario())
    assert taken == bodies and later == []
    assert committed(broker, "batched", topic) == {0: 30}


async def _first(consumer: AsyncConsumer, count: int) -> Any:
    async for message in consumer:
        yield message
        count -= 1
        if not count:
            return


def test_a_consumer_reads_only_the_queues_it_names_and_pauses_when_its_cache_is_full(
    broker: BrokerProcess,
) -> None:
    topic = new_topic(broker, 2)

    async def scenario() -> tuple[int, list[ConsumedMessage]]:
        async with AsyncProducer(broker.url) as producer:
            for queue_id in (0, 1):
                batch = [OutgoingMessage(f"q{queue_id}-{i}".encode()) for i in range(100)]
                await producer.send_batch(topic, batch, queue_id=queue_id)
        consumer = AsyncConsumer(
            broker.url, topic, "one", queue_ids=[1], batch_size=8, max_cached_messages=20, max_wait_ms=300
        )
        async with consumer:
            await asyncio.sleep(0.5)  # give the fetcher every chance to overshoot
            cached = consumer._cached_messages
            return cached, await take(consumer.poll, 100)

    cached, consumed = run(scenario())
    assert 20 <= cached < 20 + 8
    assert [message.body for message in consumed] == [f"q1-{i}".encode() for i in range(100)]
    assert {message.queue.queue_id for message in consumed} == {1}


# -- WebSocket subscriber ------------------------------------------------------------------------


def test_a_subscriber_reads_binary_records_and_its_group_resumes_after_what_it_acked(
    broker: BrokerProcess,
) -> None:
    """The first subscriber commits four messages, then takes two more and closes: closing
    acknowledges them too, so the group's next subscriber gets only what came later."""
    topic = new_topic(broker, 2)
    bodies = [f"w{i}".encode() for i in range(10)]

    async def scenario() -> tuple[list[ConsumedMessage], dict[int, int | None], list[ConsumedMessage]]:
        async with AsyncProducer(broker.url) as producer:
            await asyncio.gather(*(producer.send(topic, body, tags="W") for body in bodies[:6]))
        async with AsyncSubscriber(broker.url, topic, "ws-readers", start="first") as subscriber:
            assignment = sorted((queue.queue_id, offset) for queue, offset in subscriber.assignment.items())
            assert assignment == [(0, 0), (1, 0)]
            first = await take(subscriber.poll, 4)
            await subscriber.commit()
            after_commit = committed(broker, "ws-readers", topic)
            first += await take(subscriber.poll, 2)
        async with AsyncProducer(broker.url) as producer:
            await asyncio.gather(*(producer.send(topic, body, tags="W") for body in bodies[6:]))
        async with AsyncSubscriber(broker.url, topic, "ws-readers") as subscriber:
            rest = await take(subscriber.poll, 4)
            assert await subscriber.poll(0.3) is None
        return first, after_commit, rest

    first, after_commit, rest = run(scenario())
    assert sorted(message.body for message in first) == bodies[:6]
    assert {message.message.tags for message in first} == {"W"}
    assert after_commit == {
        queue_id: 1
        + max((m.message.queue_offset for m in first[:4] if m.queue.queue_id == queue_id), default=-1)
        for queue_id in (0, 1)
    }
    assert sorted(message.body for message in rest) == bodies[6:]


def test_a_subscriber_hands_out_batches_within_its_credit_and_acknowledges_each_whole_batch(
    broker: BrokerProcess,
) -> None:
    """Credit 2 against batches of up to 8: the credit each whole batch gives back lets the broker
    send its next frame of 2 (credit given back for the first message alone would leave frames of
    one; a credit of 2 stays within the broker's MAX_UNACKED with one batch in hand and one
    unacknowledged). Closing after the last batch acknowledges all of it, so the group's next subscriber gets
    only what came later."""
    topic = new_topic(broker, 1)
    bodies = [f"b{i}".encode() for i in range(30)]

    async def scenario() -> tuple[list[bytes], list[bytes], int]:
        async with AsyncProducer(broker.url) as producer:
            await producer.send_batch(topic, [OutgoingMessage(body) for body in bodies[:25]])
        taken: list[bytes] = []
        batches = 0
        async with AsyncSubscriber(broker.url, topic, "batches", start="first", credit=2) as subscriber:
            while len(taken) < 25:
                batch = await subscriber.poll_batch(8, timeout_s=20.0)
                assert 1 <= len(batch) <= 2, batch
                taken += [message.body for message in batch]
                batches += 1
            await subscriber.commit()
        async with AsyncProducer(broker.url) as producer:
            await producer.send_batch(topic, [OutgoingMessage(body) for body in bodies[25:]])
        async with AsyncSubscriber(broker.url, topic, "batches") as subscriber:
            later = [message.body for message in await take(subscriber.poll, 5)]
            assert await subscriber.poll_batch(8, timeout_s=0.3) == []
        return taken, later, batches

    taken, later, batches = run(scenario())
    assert taken == bodies[:25]
    assert batches == 13, batches  # 12 frames of 2 and one of 1, not frames of 1
    assert later == bodies[25:]


@pytest.mark.parametrize("credit", [4, 64])
def test_a_subscriber_keeps_reading_past_its_credit_and_the_unacked_limit(
    broker: BrokerProcess, credit: int
) -> None:
    """Credit 4: only the permits the subscriber sends as it hands messages out keep it reading.
    Credit 64, with the broker's limit of MAX_UNACKED unacknowledged messages: only the acks it sends before
    waiting for more keep it reading (half its credit, the other reason to send them, is never owed)."""
    topic = new_topic(broker, 1)
    bodies = [f"c{i}".encode() for i in range(60)]

    async def scenario() -> list[ConsumedMessage]:
        async with AsyncProducer(broker.url) as producer:
            await producer.send_batch(topic, [OutgoingMessage(body) for body in bodies])
        async with AsyncSubscriber(broker.url, topic, "credit", start="first", credit=credit) as subscriber:
            return await take(subscriber.poll, 60)

    consumed = run(scenario())
    assert [message.body for message in consumed] == bodies
    assert [message.message.queue_offset for message in consumed] == list(range(60))


def test_a_subscriber_without_a_group_reads_the_queues_it_names_and_acknowledges_nothing(
    broker: BrokerProcess,
) -> None:
    topic = new_topic(broker, 2)

    async def scenario() -> list[ConsumedMessage]:
        async with AsyncProducer(broker.url) as producer:
            for queue_id in (0, 1):
                batch = [OutgoingMessage(f"q{queue_id}-{i}".encode()) for i in range(5)]
                await producer.send_batch(topic, batch, queue_id=queue_id)
        async with AsyncSubscriber(broker.url, topic, queue_ids=[1], start="first", credit=2) as subscriber:
            consumed = await take(subscriber.poll, 5)
            assert await subscriber.poll(0.3) is None
            with pytest.raises(WharfClientError, match="nothing to commit"):
                await subscriber.commit()
        return consumed

    consumed = run(scenario())
    assert [message.body for message in consumed] == [f"q1-{i}".encode() for i in range(5)]


def test_a_nacked_message_comes_again(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 1)

    async def scenario() -> list[tuple[bytes, int]]:
        async with AsyncProducer(broker.url) as producer:
            await producer.send_batch(topic, [OutgoingMessage(b"n0"), OutgoingMessage(b"n1")])
        async with AsyncSubscriber(broker.url, topic, "nackers", start="first") as subscriber:
            first = await subscriber.poll(10)
            assert first is not None
            await subscriber.nack(first)
            again = await take(subscriber.poll, 2)
        return [(m.body, m.message.reconsume_times) for m in [first, *again]]

    assert sorted(run(scenario())) == [(b"n0", 0), (b"n0", 1), (b"n1", 0)]


def test_a_refused_subscription_raises_the_close_as_a_broker_error(broker: BrokerProcess) -> None:
    topic = new_topic(broker, 1)

    async def scenario() -> None:
        async with AsyncSubscriber(broker.url, topic, "bad", sql92="a >"):
            pass

    with pytest.raises(BrokerError) as refused:
        run(scenario())
    assert (refused.value.status, refused.value.error_code, refused.value.body["close_code"]) == (
        400,
        40015,
        4400,
    )


@pytest.mark.slow
def test_a_subscriber_opens_its_socket_again_after_the_broker_restarts(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """What the old socket delivered and was not acknowledged comes again over the new one, once:
    the copies still waiting in the subscriber are dropped."""
    process = BrokerProcess(tmp_path_factory.mktemp("restart") / "store")
    process.env["WHARF_ADVERTISED_URL"] = process.url
    process.start()
    try:
        topic = new_topic(process, 1)
        before = [f"b{i}".encode() for i in range(5)]

        async def scenario() -> list[bytes]:
            async with AsyncSubscriber(process.url, topic, "survivors", start="first") as subscriber:
                async with AsyncProducer(process.url) as producer:
                    await producer.send_batch(topic, [OutgoingMessage(body) for body in before])
                taken = await take(subscriber.poll, 2)
                await subscriber.commit()  # b0 and b1; b2-b4 wait in the subscriber, unacknowledged
                assert sum(len(frame.messages) - frame.taken for frame in subscriber._cache) == 3
                await asyncio.to_thread(process.stop)  # closes the socket with 1001
                await asyncio.to_thread(process.start)
                async with AsyncProducer(process.url) as producer:
                    await producer.send(topic, "after")
                taken += await take(subscriber.poll, 4)
                assert await subscriber.poll(0.3) is None
            return [message.body for message in taken]

        assert run(scenario()) == [*before, b"after"]
    finally:
        process.stop()
