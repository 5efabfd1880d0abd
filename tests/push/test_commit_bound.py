"""A pusher never commits an offset past its queue's end: a cut of the log (a former master
following the new one) lowers the committed offsets to the queues' new ends before ``log_cut``
ends the pusher's cursors, and a delivery that ends between the two must not commit what the cut
took (tests/ha/test_cut_cursors.py has the failover itself)."""

from __future__ import annotations

import asyncio

from app.broker import Broker
from app.broker.topic_admin import create_topic
from app.codec import IncomingMessage
from app.outbound import HttpPushTransport
from app.push.endpoint import EndpointGuard
from app.push.pusher import Backoff, Pusher, QueueCursor
from app.push.subscription import PushSubscription
from app.routing.topic_config import TopicConfig
from tests.broker.test_log_cut_listeners import broker  # noqa: F401 - a fixture

URL = "http://127.0.0.1:9/hook"


def test_a_pusher_commits_no_offset_past_its_queue_end(broker: Broker) -> None:  # noqa: F811
    async def main() -> None:
        await create_topic(broker, TopicConfig("orders", 1, 1))
        await broker.produce("orders", [IncomingMessage(body=b"a"), IncomingMessage(body=b"b")])

        async def persisted() -> None:
            return None

        subscription = PushSubscription("billing", "orders", URL, "whsec_" + "A" * 32)
        transport = HttpPushTransport()
        pusher = Pusher(
            broker, subscription, transport, persisted, Backoff(10, 100, 1, 10), EndpointGuard(URL, True)
        )
        offsets = broker.store.consumer_offsets
        try:
            cursor = QueueCursor("orders", 0, next_read=5, committed=0)  # read 0..4; the log holds 2
            pusher._commit(cursor)
            assert offsets.query("billing", "orders", 0) < 0
            assert cursor.committed == 0
            cursor.next_read = 2
            pusher._commit(cursor)
            assert offsets.query("billing", "orders", 0) == 2
        finally:
            await transport.aclose()

    asyncio.run(main())
