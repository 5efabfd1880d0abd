"""What the pull consumers share: a message as handed out, the pull's parameters, and the pull
statuses that move the offset on or mean the end of a queue."""

from __future__ import annotations

from dataclasses import dataclass

from wharf_client.codec import Message
from wharf_client.routes import MessageQueue

MOVE_ON = {"OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY", "NO_MATCHED_MESSAGE"}
# The pull reached the queue's end: nothing after the offset asked for.
AT_END = {"NO_MESSAGE_IN_QUEUE", "OFFSET_OVERFLOW_ONE"}


@dataclass(frozen=True, slots=True)
class ConsumedMessage:
    message: Message
    queue: MessageQueue

    @property
    def body(self) -> bytes:
        return self.message.body


def pull_params(
    group: str, batch_size: int, max_wait_ms: int, tags: str, sql92: str | None
) -> dict[str, str | int]:
    """A consumer's pull parameters, but for where it reads from (``offset`` or ``from``)."""
    params: dict[str, str | int] = {"group": group, "max_messages": batch_size, "max_wait_ms": max_wait_ms}
    if sql92 is not None:
        params.update(filter_type="sql92", filter=sql92)
    else:
        params["tags"] = tags
    return params
