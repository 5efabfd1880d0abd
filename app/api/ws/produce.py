"""``GET /v1/ws/produce``: messages as frames in, results with the client's ids out, pipelined.

The client sends frames without waiting for answers. Frames that arrive while a batch is being
stored queue up and go into the next batch, one store append each (and, under SYNC flush, one
group commit), so the more a client pipelines the larger the batches. Results come back in the
order the frames were sent, one ``results`` frame per batch. At most ``ws_produce_max_pending``
messages, or ``ws_max_queued_bytes`` of their frames, wait for their results; past that the broker
stops reading the socket until they are answered, so a fast producer meets TCP back-pressure rather
than a growing buffer. A frame is at most ``ws_produce_max_frame_bytes`` (else close 1009), and a
``results`` frame the client does not take within ``ws_send_timeout_s`` closes the socket (1013).
At shutdown the broker reads no more frames, stores and answers those it took in, and closes (1001).

With ``format=binary`` a binary frame is a whole batch in the ``application/vnd.wharf.batch`` format
(text frames still hold one JSON message each): its messages join the pipeline like frames, and
their results are tagged with the frame's number and the message's index instead of an ``id``.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple, cast

from fastapi import APIRouter, WebSocket

from app.api import wire
from app.api.errors import ApiError, ErrorCode, code_for, from_broker
from app.api.peers import client_born_host
from app.api.ws.going_away import websocket_sessions
from app.api.ws.protocol import GOING_AWAY, WsClose, parse_frame, receive_raw, serve, wants_binary
from app.api.ws.sender import FrameSender
from app.broker import Broker, BrokerError
from app.codec import BatchFormatError, IncomingMessage, batch_count, parse_batch
from app.store.errors import StoreError
from app.store.filter import FilterExpressionError

router = APIRouter()

# (what the result is tagged with, the message or why it was refused). The tag is the client's
# ``id`` for a JSON frame; for a message of a binary batch frame, ``frame`` (the frame's number on
# the socket, from 0) and ``index`` (its place in the batch); ``frame`` alone for a batch that does
# not parse.
Parsed = tuple[dict[str, Any], IncomingMessage | ApiError]
Entry = tuple[dict[str, Any], "IncomingMessage | ApiError | BinaryFrame"]


class BinaryFrame(NamedTuple):
    """A binary frame not parsed yet: frames of plain batches are stored together in one compiled
    call (:meth:`Broker.produce_batches`), any other is parsed into its messages then."""

    number: int
    data: bytes
    messages: int  # as its head says (one when it says none): what it weighs against the bound


def leading_frames(entries: list[Entry]) -> list[BinaryFrame]:
    frames = []
    for _, item in entries:
        if not isinstance(item, BinaryFrame):
            break
        frames.append(item)
    return frames


def parse_message(frame: dict[str, Any]) -> IncomingMessage | ApiError:
    """A produce frame's message: the HTTP API's message object, with ``id`` and ``type`` aside."""
    fields = {name: value for name, value in frame.items() if name not in ("id", "type")}
    try:
        return wire.message_of(fields)
    except ApiError as exc:
        return exc


def parse_batch_frame(data: bytes, number: int) -> list[Parsed]:
    """The entries of a binary frame: a batch in the ``application/vnd.wharf.batch`` format."""
    try:
        batch = parse_batch(data)
    except BatchFormatError as exc:
        return [({"frame": number}, ApiError(ErrorCode.MALFORMED_BATCH, str(exc)))]
    if not batch:
        return [({"frame": number}, ApiError(ErrorCode.MALFORMED_BODY, "the batch holds no message"))]
    return [({"frame": number, "index": index}, message) for index, message in enumerate(batch)]


def error_result(tag: dict[str, Any], error: Exception) -> dict[str, Any]:
    if isinstance(error, BrokerError):
        error = from_broker(error)
    if isinstance(error, ApiError):
        code, message = error.code, error.message
    else:
        code, message = code_for(error), str(error)
    return {**tag, "error_code": int(code), "message": message}


class ProduceSession:
    def __init__(self, websocket: WebSocket, broker: Broker, topic: str, binary: bool = False) -> None:
        self.websocket = websocket
        self.broker = broker
        self.topic = topic
        self.binary = binary  # binary frames hold batches (format=binary)
        self.born_host = client_born_host(websocket.scope)
        self.binary_frames = 0
        settings = broker.settings
        self.sender = FrameSender(websocket, settings.ws_max_queued_bytes, settings.ws_send_timeout_s)
        self.max_pending = settings.ws_produce_max_pending
        self.max_pending_bytes = settings.ws_max_queued_bytes
        self.max_frame_bytes = settings.ws_produce_max_frame_bytes
        self.waiting: list[Entry] = []
        self.pending = 0  # waiting plus the batch being stored
        self.pending_bytes = 0  # the frames of those messages
        # What of ``pending`` and ``pending_bytes`` is still waiting (not in the batch being stored).
        self.waiting_weight = self.waiting_bytes = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._answered = asyncio.Event()  # every frame taken in has its result sent
        self._answered.set()

    async def run(self) -> None:
        receiver = asyncio.ensure_future(self._receive_loop())
        producer = asyncio.ensure_future(self._produce_loop())
        going_away = asyncio.ensure_future(websocket_sessions(self.websocket.app.state).going_away.wait())
        try:
            done, _ = await asyncio.wait(
                {receiver, producer, going_away}, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                task.result()
            if going_away in done:
                # Shutdown: read no more frames; store and answer those taken in, then close 1001.
                receiver.cancel()
                answered = asyncio.ensure_future(self._answered.wait())
                await asyncio.wait({producer, answered}, return_when=asyncio.FIRST_COMPLETED)
                answered.cancel()
                if producer.done():
                    producer.result()
                raise WsClose(GOING_AWAY, "the broker is shutting down")
        finally:
            for task in (receiver, producer, going_away):
                task.cancel()
            await asyncio.gather(receiver, producer, going_away, return_exceptions=True)
            self.sender.close()

    async def _receive_loop(self) -> None:
        while True:
            await self._room.wait()
            received = await receive_raw(self.websocket, self.max_frame_bytes)
            if received is None:
                return
            data, size = received
            if self.binary and isinstance(data, bytes):
                item = BinaryFrame(self.binary_frames, data, max(batch_count(data), 1))
                entry: Entry = ({"frame": item.number}, item)
                messages = item.messages
                self.binary_frames += 1
            else:
                frame = parse_frame(data)
                entry, messages = ({"id": frame.get("id")}, parse_message(frame)), 1
            self.waiting.append(entry)
            self._answered.clear()
            self.pending += messages
            self.pending_bytes += size
            self.waiting_weight += messages
            self.waiting_bytes += size
            if self.pending >= self.max_pending or self.pending_bytes >= self.max_pending_bytes:
                self._room.clear()
            self._arrived.set()

    async def _produce_loop(self) -> None:
        while True:
            await self._arrived.wait()
            batch, self.waiting = self.waiting, []
            taken, taken_bytes = self.waiting_weight, self.waiting_bytes
            self.waiting_weight = self.waiting_bytes = 0
            self._arrived.clear()
            results = await self._store(batch)
            await self.sender.send({"type": "results", "results": results})
            self.pending -= taken
            self.pending_bytes -= taken_bytes
            self._room.set()
            if not self.pending:
                self._answered.set()

    async def _store(self, batch: list[Entry]) -> list[dict[str, Any]]:
        """Results in frame order, stored in frame order: the binary frames of plain batches
        together in one compiled call, the messages of other frames in one append per run."""
        if not self.binary:  # JSON frames only: one message each
            return await self._store_messages(cast(list[Parsed], batch))
        results: list[dict[str, Any]] = []
        position = 0
        while position < len(batch):
            frames = leading_frames(batch[position:])
            if frames:
                stored = await self._store_frames(frames)
                for frame, answers in zip(frames, stored, strict=False):
                    results.extend(
                        {"frame": frame.number, "index": index, **answer}
                        for index, answer in enumerate(answers)
                    )
                position += len(stored)
                if len(stored) < len(frames):  # not a plain batch: its messages, parsed
                    frame = frames[len(stored)]
                    results.extend(await self._store_messages(parse_batch_frame(frame.data, frame.number)))
                    position += 1
                continue
            run: list[Parsed] = []
            for tag, item in batch[position:]:
                if isinstance(item, BinaryFrame):
                    break
                run.append((tag, item))
            results.extend(await self._store_messages(run))
            position += len(run)
        return results

    async def _store_frames(self, frames: list[BinaryFrame]) -> list[list[dict[str, Any]]]:
        """The answers of the leading frames stored in one compiled call; none when the first is
        not a plain batch, or the broker refuses it (its messages, parsed, then say why)."""
        try:
            return await self.broker.produce_batches(
                self.topic, [frame.data for frame in frames], self.born_host
            )
        except (BrokerError, StoreError):
            return []

    async def _store_messages(self, batch: list[Parsed]) -> list[dict[str, Any]]:
        """Results in frame order; one append for every valid message of the batch."""
        valid = [(tag, item) for tag, item in batch if isinstance(item, IncomingMessage)]
        stored: dict[int, dict[str, Any]] = {}
        if not valid:
            return [error_result(tag, item) for tag, item in batch if isinstance(item, ApiError)]
        try:
            answers = await self.broker.produce(self.topic, [item for _, item in valid], self.born_host)
            for (tag, item), answer in zip(valid, answers, strict=True):
                stored[id(item)] = {**tag, **answer}
        except (ApiError, BrokerError, StoreError, FilterExpressionError) as batch_error:
            if len(valid) == 1:
                tag, item = valid[0]
                stored[id(item)] = error_result(tag, batch_error)
            else:
                # One bad message refuses the whole append: store the others one by one.
                for tag, item in valid:
                    try:
                        (answer,) = await self.broker.produce(self.topic, [item], self.born_host)
                        stored[id(item)] = {**tag, **answer}
                    except (ApiError, BrokerError, StoreError, FilterExpressionError) as error:
                        stored[id(item)] = error_result(tag, error)
        return [
            stored[id(item)] if isinstance(item, IncomingMessage) else error_result(tag, item)
            for tag, item in batch
        ]


@router.websocket("/produce")
async def produce(websocket: WebSocket) -> None:
    """Store the messages sent as frames and answer each with its result, pipelined."""

    async def handle(broker: Broker) -> None:
        topic = websocket.query_params.get("topic")
        if not topic:
            raise ApiError(ErrorCode.BAD_REQUEST, "the topic parameter is required")
        binary = wants_binary(websocket.query_params)
        await broker.topic_for_write(topic)
        await ProduceSession(websocket, broker, topic, binary).run()

    await serve(websocket, handle)
