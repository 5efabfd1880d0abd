"""The HTTP benchmark's baseline: a FastAPI route that reads its body and answers a small JSON.

Beside it, :data:`asgi`: the same answer from a raw ASGI callable (no FastAPI, no Starlette), the
floor of anything served through uvicorn's ASGI request cycle (``uvicorn bench.bare_app:asgi``).

It has the produce endpoint's path (with its path parameter) and answers an object of about the
size of the broker's produce answer, and nothing else: no validation, no store. Served by uvicorn
with the broker's flags (uvloop, httptools, one worker), it is what the framework alone can do on
this machine, which the broker's single-message produce is judged against::

    .venv/bin/python -m uvicorn bench.bare_app:app --loop uvloop --http httptools --workers 1
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

app = FastAPI(title="bare")

# As long as a broker produce answer for one message (msg_id, unique_id, queue, offset, status).
ANSWER = orjson.dumps(
    {
        "results": [
            {
                "msg_id": "7F00000100001F90000000000000ABCD",
                "unique_id": "7F0000010000ABCD1234000000000001",
                "queue_id": 0,
                "queue_offset": 0,
                "status": "SEND_OK",
            }
        ]
    }
)


@app.post("/v1/topics/{topic}/messages")
async def produce(topic: str, request: Request) -> Response:
    await request.body()
    return Response(ANSWER, media_type="application/json")


_ANSWER_HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]


async def asgi(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """The same answer as :func:`produce` from a bare ASGI callable: the body read, nothing else."""
    if scope["type"] != "http":
        return  # the lifespan: nothing to start
    message = await receive()
    while message.get("more_body", False):
        message = await receive()
    await send({"type": "http.response.start", "status": 200, "headers": _ANSWER_HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})
