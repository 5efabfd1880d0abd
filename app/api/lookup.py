"""Message lookup: by message id (no index needed: the id names the CommitLog offset)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from app.api.codec import record_to_json
from app.api.errors import ApiError, ErrorCode
from app.api.schemas import ErrorEnvelope, MessageOut
from app.api.topics import BrokerDep
from app.store import parse_message_id

router = APIRouter(prefix="/v1/messages", tags=["messages"])


@router.get(
    "/{msg_id}",
    response_model=MessageOut,
    summary="Look a message up by its id",
    responses={400: {"model": ErrorEnvelope}, 404: {"model": ErrorEnvelope}},
)
def get_message(
    msg_id: Annotated[str, Path(description="32 hexadecimal digits: store host and CommitLog offset")],
    broker: BrokerDep,
) -> dict[str, Any]:
    try:
        _, _, physical_offset = parse_message_id(msg_id)
    except ValueError as exc:
        raise ApiError(ErrorCode.INVALID_MESSAGE_ID, f"message id {msg_id!r} is not valid: {exc}") from None
    raw = broker.store.read_record(physical_offset)
    if raw is None:
        raise ApiError(ErrorCode.MESSAGE_NOT_FOUND, f"no message with id {msg_id}")
    return record_to_json(raw)
