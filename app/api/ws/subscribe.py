"""``GET /v1/ws/subscribe``: the broker pushes a topic's messages to a WebSocket, within credit.

One reader task per assigned queue reads through the store and, when the queue has nothing new,
waits in the pull hold service exactly as a long poll does, so an arrival wakes it and nothing
polls. A reader sends only while the client's credit lasts (and, with a group, while fewer than
``ws_max_unacked`` messages wait for an ack); with no credit it waits for a permit frame.

Bytes are bounded too, whatever the credit: readers encode frames only while fewer than
``ws_max_queued_bytes`` wait for the socket (a frame is cut to what fits, at least one message),
so a client that stops reading costs the broker at most that, and a frame the client does not
take within ``ws_send_timeout_s`` closes the socket with 1013. A subscriber the broker waits on
(no credit, or its unacked limit reached) that sends no frame for ``ws_idle_timeout_s`` is closed
with 1008. Either way its unacknowledged messages were never committed: the group's next
subscriber reads them again.

When the broker's log is cut to follow a new master (a former master steps down), other messages
are stored at the queue offsets the socket read: every subscriber is closed with 1012 at once,
and acks that reach it afterwards commit nothing. The client subscribes again, from the group's
committed offset (which the cut lowered to the queue's new end).

Frames from the client: ``permit`` (grant credit), ``ack`` / ``nack`` (with a group) and
``status``. Frames from the broker: ``assignment``, ``messages``, ``committed`` and ``status``;
with ``format=binary`` a ``messages`` frame is a binary frame of the stored records instead.
docs/reference/websocket.md is the reference.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson
from fastapi import APIRouter, WebSocket

from app.api.errors import ErrorCode
from app.api.ws.cursor import QueueCursor
from app.api.ws.frames import (
    cloudevents_frame,
    cloudevents_json,
    messages_frame,
    records_frame,
    redelivered_record,
)
from app.api.ws.going_away import websocket_sessions
from app.api.ws.params import SubscribeParams, parse_subscribe, start_offset
from app.api.ws.protocol import (
    GOING_AWAY,
    POLICY_VIOLATION,
    SERVICE_RESTART,
    WsClose,
    bad_frame,
    int_field,
    receive_frame,
    serve,
)
from app.api.ws.sender import FrameSender
from app.broker import Broker, read_or_hold
from app.broker.dead_letter import max_reconsume_times, send_to_dead_letter
from app.cloudevents import render_cloudevent, topic_source
from app.codec import as_consumed, record_to_json
from app.store import GetMessageStatus

router = APIRouter()

_WAIT_STATUSES = (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE)

# Member ids of grouped subscribers: in join order when sorted, and never an HTTP client_id ("#").
_member_ids = itertools.count(1)


class Subscription:
    """One subscribed socket: its credit, its queues and their reader tasks."""

    def __init__(self, websocket: WebSocket, broker: Broker, params: SubscribeParams) -> None:
        settings = broker.settings
        self.websocket = websocket
        self.broker = broker
        self.params = params
        self.member_id = f"ws#{next(_member_ids):09d}"
        self.sender = FrameSender(
            websocket, settings.ws_max_queued_bytes, settings.ws_send_timeout_s, on_release=self._notify
        )
        self.max_frame_bytes = settings.ws_max_frame_bytes
        self.idle_timeout_s = settings.ws_idle_timeout_s
        self._waiting_since: float | None = None  # when the broker began waiting on the client
        self._waiting = asyncio.Event()
        self.credit = params.credit
        self.unacked = 0
        self.cursors: dict[int, QueueCursor] = {}
        self.max_credit = settings.ws_max_credit
        self.batch = settings.ws_batch_messages
        self.max_unacked = settings.ws_max_unacked if params.group is not None else None
        self.hold_s = settings.ws_hold_ms / 1000
        self._changed = asyncio.Event()
        self._readers_waiting = 0  # readers in _until_changed: a change with none waiting is free
        self._failure: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._side_tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._grouped = params.group is not None and params.queues is None
        self.source = topic_source(settings.resolved_advertised_url, params.topic)  # format=cloudevents

    # -- lifecycle ---------------------------------------------------------------------------------

    async def run(self) -> None:
        params = self.params
        if self._grouped:
            assert params.group is not None
            self.broker.groups.attach(
                params.group,
                self.member_id,
                params.topic,
                params.expression,
                lambda assignment: self.assign(assignment.get(params.topic, [])),
            )
        else:
            self.assign(params.queues if params.queues is not None else list(range(params.read_queues)))
        receiver = asyncio.ensure_future(self._receive_loop())
        self._side_tasks.add(self._spawn(self._watch_idle()))
        self._side_tasks.add(self._spawn(self._close_when_going_away()))
        stop_listening = self.broker.on_log_cut(self._close_on_log_cut)
        self.broker.metrics.websocket_subscribers += 1
        try:
            await asyncio.wait({receiver, self._failure}, return_when=asyncio.FIRST_COMPLETED)
            if self._failure.done():
                self._failure.result()
            receiver.result()
        finally:
            stop_listening()
            self.broker.metrics.websocket_subscribers -= 1
            self._closed = True
            if self._grouped:
                assert params.group is not None
                self.broker.groups.leave(params.group, self.member_id)
            receiver.cancel()
            tasks = [cursor.task for cursor in self.cursors.values() if cursor.task is not None]
            tasks.extend(self._side_tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(receiver, *tasks, return_exceptions=True)
            self.sender.close()
            if not self._failure.done():
                self._failure.cancel()

    async def _close_when_going_away(self) -> None:
        await websocket_sessions(self.websocket.app.state).going_away.wait()
        raise WsClose(GOING_AWAY, "the broker is shutting down")

    def _close_on_log_cut(self) -> None:
        """The log under the cursors was cut: what they read is not what the queues now hold at
        those offsets. The socket fails at once (no ack is committed from here on, see :meth:`_ack`)."""
        self._fail(
            WsClose(
                SERVICE_RESTART,
                "the broker's log was cut to follow its new master: subscribe again "
                "(from the group's committed offset)",
            )
        )

    def _fail(self, error: BaseException) -> None:
        if not self._closed and not self._failure.done():
            self._failure.set_exception(error)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._side_tasks.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self._fail(error)

    def _spawn(self, coroutine: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        task.add_done_callback(self._task_done)
        return task

    def _notify(self) -> None:
        """Wake every reader waiting for credit, ack room, byte room or a redelivery."""
        if self._readers_waiting:
            self._changed.set()
            self._changed = asyncio.Event()

    async def _until_changed(self) -> None:
        """Wait for the next :meth:`_notify`."""
        self._readers_waiting += 1
        try:
            await self._changed.wait()
        finally:
            self._readers_waiting -= 1

    # -- silent clients --------------------------------------------------------------------------

    def _heard(self) -> None:
        """A frame came from the client: it is not silent."""
        self._waiting_since = None
        self._waiting.clear()

    def _wait_on_client(self) -> None:
        """A reader cannot go on until the client sends a frame (a permit or an ack)."""
        if self._waiting_since is None:
            self._waiting_since = asyncio.get_running_loop().time()
            self._waiting.set()

    async def _watch_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            since = self._waiting_since
            if since is None:
                await self._waiting.wait()
                continue
            remaining = since + self.idle_timeout_s - loop.time()
            if remaining <= 0:
                raise WsClose(
                    POLICY_VIOLATION,
                    f"{int(ErrorCode.WS_CLIENT_IDLE)} no frame from the client for "
                    f"{self.idle_timeout_s:g} s while the broker waits for a permit or an ack",
                )
            await asyncio.sleep(remaining)

    # -- queue assignment (the group's allocation, app.broker.groups) ------------------------------

    def assign(self, queue_ids: list[int]) -> None:
        """Read exactly ``queue_ids`` from now on; called at start and on every group rebalance."""
        try:
            wanted = set(queue_ids)
            for queue_id in [queue_id for queue_id in self.cursors if queue_id not in wanted]:
                cursor = self.cursors.pop(queue_id)
                self.unacked -= len(cursor.inflight)
                if cursor.task is not None:
                    cursor.task.cancel()
            started = []
            for queue_id in sorted(wanted.difference(self.cursors)):
                offset = start_offset(self.broker, self.params, queue_id)
                cursor = self.cursors[queue_id] = QueueCursor(queue_id, offset, offset)
                started.append(cursor)
            frame = {
                "type": "assignment",
                "topic": self.params.topic,
                "group": self.params.group,
                "queues": [
                    {"queue_id": queue_id, "offset": self.cursors[queue_id].offset}
                    for queue_id in sorted(self.cursors)
                ],
            }
            self._side_tasks.add(self._spawn(self._announce(frame, started)))
            self._notify()
        except Exception as exc:  # a rebalance started by another socket must not fail there
            self._fail(exc)

    async def _announce(self, frame: dict[str, Any], started: list[QueueCursor]) -> None:
        """Send the assignment, then start reading the new queues: no message precedes its queue's
        announcement."""
        await self.sender.send(frame)
        for cursor in started:
            if self.cursors.get(cursor.queue_id) is cursor:  # not revoked in the meantime
                cursor.task = self._spawn(self._read(cursor))

    # -- client frames ---------------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        while True:
            received = await receive_frame(self.websocket, self.max_frame_bytes)
            if received is None:
                return
            frame, _ = received
            self._heard()
            kind = frame.get("type")
            if kind == "permit":
                self._permit(int_field(frame, "n", minimum=1))
            elif kind == "ack":
                await self._ack(frame)
            elif kind == "nack":
                await self._nack(frame)
            elif kind == "status":
                await self.sender.send(self.status())
            else:
                raise bad_frame(f"unknown frame type {kind!r}: expected permit, ack, nack or status")

    def _permit(self, n: int) -> None:
        if self.credit + n > self.max_credit:
            raise WsClose.from_error(
                ErrorCode.INVALID_PARAMETER,
                f"credit would be {self.credit + n}, the limit is {self.max_credit}",
            )
        self.credit += n
        self._notify()

    def _acknowledged(self, frame: dict[str, Any]) -> tuple[QueueCursor | None, list[int]]:
        if self.params.group is None:
            raise bad_frame(f"{frame.get('type')} needs a group: subscribe with ?group=")
        queue_id = int_field(frame, "queue_id")
        if "offsets" in frame:
            offsets = frame["offsets"]
            if not isinstance(offsets, list) or not all(
                isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0 for offset in offsets
            ):
                raise bad_frame(f"{frame.get('type')} 'offsets' must be a list of integers >= 0")
        else:
            offsets = [int_field(frame, "offset")]
        # A queue this socket no longer reads was handed to another member: its acks are void.
        return self.cursors.get(queue_id), offsets

    async def _ack(self, frame: dict[str, Any]) -> None:
        cursor, offsets = self._acknowledged(frame)
        if cursor is None:
            return
        acked = sum(1 for offset in offsets if cursor.ack(offset))
        if not acked:
            return
        self.unacked -= acked
        self._notify()
        if self._failure.done():
            return  # the socket is closing: what it read may have been cut from the log
        committed = cursor.advance_commit()
        if committed is not None:
            assert self.params.group is not None
            self.broker.commit_offset(self.params.group, self.params.topic, cursor.queue_id, committed)
            await self.sender.send({"type": "committed", "queue_id": cursor.queue_id, "offset": committed})

    async def _nack(self, frame: dict[str, Any]) -> None:
        """Deliver again, ahead of newer messages; past the group's max reconsume times, to the
        group's dead-letter topic instead (then it counts as acknowledged)."""
        cursor, offsets = self._acknowledged(frame)
        if cursor is None or not any([cursor.nack(offset) for offset in offsets]):
            return
        assert self.params.group is not None
        limit = max_reconsume_times(self.broker, self.params.group)
        dead = [offset for offset in offsets if cursor.nacks.get(offset, 0) > limit]
        for offset in dead:
            (stored,) = self.broker.store.read_messages(self.params.topic, cursor.queue_id, offset, 1) or (
                None,
            )
            if stored is not None and stored.queue_offset == offset:
                await send_to_dead_letter(self.broker, self.params.group, stored, cursor.nacks[offset] - 1)
        if dead:
            await self._ack({"queue_id": cursor.queue_id, "offsets": dead})
        self._notify()

    def status(self) -> dict[str, Any]:
        return {
            "type": "status",
            "credit": self.credit,
            "unacked": self.unacked,
            "queues": [
                {
                    "queue_id": cursor.queue_id,
                    "offset": cursor.offset,
                    "committed": cursor.committed if self.params.group is not None else None,
                    "inflight": len(cursor.inflight),
                }
                for cursor in sorted(self.cursors.values(), key=lambda cursor: cursor.queue_id)
            ],
        }

    # -- reading ---------------------------------------------------------------------------------

    def _room(self) -> int:
        """How many new messages may be sent now."""
        room = min(self.credit, self.batch)
        if self.max_unacked is not None:
            room = min(room, self.max_unacked - self.unacked)
        return room

    async def _read(self, cursor: QueueCursor) -> None:
        broker = self.broker
        topic, queue_id, message_filter = self.params.topic, cursor.queue_id, self.params.message_filter

        def room() -> int:
            """New messages that may be sent now; none while bytes wait or a redelivery is due."""
            if self.sender.room_bytes() <= 0 or cursor.redeliver:
                return 0
            return self._room()

        while True:
            if self.sender.room_bytes() <= 0:
                # The client has not taken what was sent: no more is read for it (the sender's
                # timeout ends a client that takes nothing).
                await self._until_changed()
                continue
            if cursor.redeliver:
                if self.credit > 0:
                    await self._redeliver(cursor)
                else:
                    self._wait_on_client()
                    await self._until_changed()
                continue
            cursor.kick.clear()
            if self._room() <= 0:
                self._wait_on_client()
                await self._until_changed()
                continue
            read = await read_or_hold(
                broker.store,
                broker.holds,
                topic,
                queue_id,
                cursor.offset,
                room,
                message_filter,
                self.hold_s,
                wake=cursor.kick,
                at_end=cursor.at_end,
            )
            cursor.at_end = False
            if read.shutdown:
                raise WsClose(GOING_AWAY, "the broker is shutting down")
            result = read.result
            if result.status is GetMessageStatus.FOUND:
                # Everything from the read to the send happens without a pause, so two readers
                # cannot both spend the same credit or the same byte room.
                if self.params.binary:
                    frame, sent = records_frame(result.records, self.sender.room_bytes())
                elif self.params.cloudevents:
                    frame, sent = cloudevents_frame(
                        topic,
                        queue_id,
                        result.records,
                        result.queue_offsets,
                        self.sender.room_bytes(),
                        self.source,
                    )
                else:
                    frame, sent = messages_frame(topic, queue_id, result.records, self.sender.room_bytes())
                offsets = result.queue_offsets[:sent]
                if sent == len(result.records):
                    cursor.offset = result.next_offset
                    cursor.at_end = cursor.offset >= result.max_offset
                else:
                    cursor.offset = result.queue_offsets[sent]
                self.credit -= sent
                broker.metrics.count_consumed(topic, self.params.group, sent)
                if self.max_unacked is not None:
                    cursor.delivered(offsets)
                    self.unacked += sent
                await (self.sender.send_binary if self.params.binary else self.sender.send_encoded)(frame)
            elif result.status not in _WAIT_STATUSES:
                # Past non-matching messages, or back within the queue's range.
                cursor.offset = result.next_offset

    async def _redeliver(self, cursor: QueueCursor) -> None:
        """Send a negatively acknowledged message again, counting the nacks in reconsume_times."""
        offset = cursor.redeliver.popleft()
        if offset not in cursor.inflight:
            return  # acknowledged after all
        result = self.broker.store.get_message(self.params.topic, cursor.queue_id, offset, 1, None)
        if result.status is not GetMessageStatus.FOUND or result.queue_offsets[0] != offset:
            # Gone from the store (retention): there is nothing left to deliver.
            cursor.ack(offset)
            self.unacked -= 1
            self._notify()
            return
        nacks = cursor.nacks.get(offset, 0)
        self.credit -= 1
        self.broker.metrics.count_consumed(self.params.topic, self.params.group, 1)
        if self.params.binary:
            await self.sender.send_binary(redelivered_record(result.records[0], nacks))
            return
        # As its first delivery showed it (messages_frame): under its original topic when it comes
        # from a retry topic.
        message = as_consumed(record_to_json(result.records[0]))
        if self.params.cloudevents:
            event = orjson.dumps(render_cloudevent(message, self.source))
            await self.sender.send_encoded(
                cloudevents_json(self.params.topic, cursor.queue_id, [offset], [event])
            )
            return
        message["reconsume_times"] += nacks
        await self.sender.send(
            {
                "type": "messages",
                "topic": self.params.topic,
                "queue_id": cursor.queue_id,
                "messages": [message],
            }
        )


@router.websocket("/subscribe")
async def subscribe(websocket: WebSocket) -> None:
    """Push a topic's messages to this socket within the credit the client grants."""

    async def handle(broker: Broker) -> None:
        params = await parse_subscribe(websocket.query_params, broker)
        await Subscription(websocket, broker, params).run()

    await serve(websocket, handle)
