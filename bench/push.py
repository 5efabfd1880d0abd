"""Push subscription benchmark: deliveries per second to a local endpoint against ``max_in_flight``,
and the delivery latency from produce to the endpoint's handler.

Run from the repository root::

    .venv/bin/python -m bench.push [--quick] [--json out.json] [--only drain,latency]

A real broker (``python -m app`` at the store's defaults, ``WHARF_PUSH_ALLOW_PRIVATE=true``) runs in its own
process; the endpoint is a minimal HTTP/1.1 server on asyncio streams in this process (it parses a
request and answers 204), sharing the machine's cores with the broker.

* ``drain``: a topic of 4 queues holds ``messages`` small messages (128 B) produced while the
  subscription was paused; it is resumed and timed until the endpoint has them all, once per
  ``max_in_flight`` (a fresh group each time). Figures are deliveries per second (the median of
  the repeats), each against ``max_in_flight`` 1.
* ``latency``: with the subscription running (``max_in_flight`` 16), messages are produced one per
  request at ``rate`` per second; a message's latency is the endpoint's clock when the request
  reaches its handler minus the message's born timestamp (the broker's clock at produce: same host).
  Figures are p50 and p99 in milliseconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import httpx

from bench import harness
from bench.harness import Result
from bench.http_setup import broker_settings
from tests.api.server import BrokerProcess

SECTIONS = ("drain", "latency")
QUEUES = 4
BODY = "x" * 128
TOPIC = "push-bench"


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    messages: int
    in_flight: tuple[int, ...]
    latency_messages: int
    rate: float  # latency section: messages produced per second


FULL = Plan(repeats=3, messages=10_000, in_flight=(1, 4, 16, 64), latency_messages=2_000, rate=200.0)
QUICK = replace(FULL, repeats=1, messages=2_000, in_flight=(1, 16), latency_messages=300)


class Endpoint:
    """A minimal HTTP/1.1 endpoint: counts requests and records each one's latency."""

    def __init__(self) -> None:
        self.count = 0
        self.latencies_ms: list[float] = []
        self.done = asyncio.Event()
        self.expected = 0
        self.server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/hook"

    def expect(self, count: int) -> None:
        self.count, self.expected, self.latencies_ms = 0, count, []
        self.done = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                now_ms = time.time() * 1000
                length, born_ms = 0, None
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    lowered = name.strip().lower()
                    if lowered == b"content-length":
                        length = int(value)
                    elif lowered == b"wharf-born-timestamp":
                        born_ms = int(value)
                await reader.readexactly(length)
                if born_ms is not None:
                    self.latencies_ms.append(now_ms - born_ms)
                self.count += 1
                if self.count >= self.expected:
                    self.done.set()
                writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # the benchmark is over: the broker's idle connections are dropped
        finally:
            writer.close()


async def produce(http: httpx.AsyncClient, count: int) -> None:
    for start in range(0, count, 500):
        batch = [{"body": BODY} for _ in range(min(500, count - start))]
        answer = await http.post(f"/v1/topics/{TOPIC}/messages", json={"messages": batch})
        answer.raise_for_status()


async def subscribe(http: httpx.AsyncClient, group: str, url: str, in_flight: int, paused: bool) -> None:
    body = {"topic": TOPIC, "url": url, "max_in_flight": in_flight, "paused": paused}
    answer = await http.put(f"/v1/groups/{group}/push", json=body)
    answer.raise_for_status()


async def drain(http: httpx.AsyncClient, endpoint: Endpoint, plan: Plan, in_flight: int, run: int) -> float:
    group = f"drain-{in_flight}-{run}"
    await subscribe(http, group, endpoint.url, in_flight, paused=True)
    await produce(http, plan.messages)
    endpoint.expect(plan.messages)
    started = time.perf_counter()
    await subscribe(http, group, endpoint.url, in_flight, paused=False)
    await endpoint.done.wait()
    seconds = time.perf_counter() - started
    (await http.delete(f"/v1/groups/{group}/push")).raise_for_status()
    return plan.messages / seconds


async def latency(http: httpx.AsyncClient, endpoint: Endpoint, plan: Plan, run: int) -> list[float]:
    group = f"latency-{run}"
    await subscribe(http, group, endpoint.url, 16, paused=False)
    endpoint.expect(plan.latency_messages)
    interval = 1 / plan.rate
    started = time.perf_counter()
    for number in range(plan.latency_messages):
        await asyncio.sleep(max(0.0, started + number * interval - time.perf_counter()))
        (await http.post(f"/v1/topics/{TOPIC}/messages", json={"body": BODY})).raise_for_status()
    await endpoint.done.wait()
    (await http.delete(f"/v1/groups/{group}/push")).raise_for_status()
    return sorted(endpoint.latencies_ms)


def percentile(values: Sequence[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(fraction * len(values)))]


async def run_all(plan: Plan, sections: list[str], broker: BrokerProcess) -> list[Result]:
    endpoint = Endpoint()
    await endpoint.start()
    results: list[Result] = []
    async with httpx.AsyncClient(base_url=broker.url, timeout=60) as http:
        (await http.post("/v1/topics", json={"name": TOPIC, "queues": QUEUES})).raise_for_status()
        if "drain" in sections:
            drained: list[Result] = []
            for in_flight in plan.in_flight:
                samples = [await drain(http, endpoint, plan, in_flight, run) for run in range(plan.repeats)]
                result = Result(
                    f"drain max_in_flight={in_flight}",
                    "deliveries/s",
                    samples,
                    alias=f"in_flight={in_flight}",
                )
                drained.append(result.against(drained[0]) if drained else result)
            harness.print_table(
                drained, f"drain ({plan.messages} messages of {len(BODY)} B, {QUEUES} queues)"
            )
            results += drained
        if "latency" in sections:
            p50, p99 = [], []
            for run in range(plan.repeats):
                measured = await latency(http, endpoint, plan, run)
                p50.append(percentile(measured, 0.5))
                p99.append(percentile(measured, 0.99))
            timed = [Result("latency p50", "ms", p50), Result("latency p99", "ms", p99)]
            harness.print_table(
                timed, f"latency (produce to handler, {plan.rate:g} messages/s, max_in_flight 16)"
            )
            results += timed
    assert endpoint.server is not None
    endpoint.server.close()
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = harness.arguments("push", __doc__ or "", "fewer messages, one repeat", SECTIONS, raw=True)
    args, plan, sections = harness.parse(parser, argv, FULL, QUICK, SECTIONS)
    started = time.perf_counter()
    with harness.scratch_dir("push-bench-", harness.scratch_parent()) as root:
        broker = BrokerProcess(root / "store", push_allow_private="true", **broker_settings()).start()
        try:
            results = asyncio.run(run_all(plan, sections, broker))
        finally:
            broker.stop()
    settings = {"plan": asdict(plan), "sections": sections}
    harness.report("push", args.json, argv, results, settings, started)


if __name__ == "__main__":
    main()
