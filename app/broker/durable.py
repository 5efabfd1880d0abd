"""Appends the broker makes itself (retries, dead letters, transactions), as durable as the flush
mode promises before they are answered."""

from __future__ import annotations

from app.store import Message, MessageStore
from app.store.results import AppendResult


async def append_all_durably(store: MessageStore, messages: list[Message]) -> tuple[list[AppendResult], bool]:
    """Append ``messages`` in one append and wait until they are as durable as the flush mode
    promises; the results, and False when the group commit did not confirm them in time."""
    appended = store.append(messages)
    durable = True
    if store.group_commit is not None:
        durable = await store.wait_durable(appended)
    return appended, durable
