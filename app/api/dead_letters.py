"""Skipping a group's dead letters: ``POST /v1/groups/{group}/dlq/skip``.

RocketMQ deletes no single message, so a dead letter is "deleted" by passing over it: the group's
mark on its ``%DLQ%{group}`` topic (the mark a resend of all moves, answered as ``resent_until`` by
``GET /v1/groups/{group}/dlq``) goes past it. Admin only under the ACL, like a resend.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from app.api.errors import ApiError, ErrorCode
from app.api.groups import GroupName
from app.api.schemas import ErrorEnvelope
from app.api.topics import BrokerDep
from app.broker import dead_letter

router = APIRouter(prefix="/v1/groups", tags=["groups"])


class SkipRequest(BaseModel):
    all: bool = Field(False, description="Pass over every dead letter stored now")
    through_offset: int | None = Field(
        None, ge=0, description="Pass over every dead letter up to and including this queue offset"
    )

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"all": True}, {"through_offset": 41}]}
    )


class SkipAnswer(BaseModel):
    group: str
    skipped: int = Field(description="How many dead letters the mark passed now")
    resent_until: int = Field(description="The mark: dead letters below it were resent or skipped")


@router.post(
    "/{group}/dlq/skip",
    response_model=SkipAnswer,
    summary="Pass over dead letters without resending them: all, or up to and including one offset",
    description=(
        "Moves the group's mark on %DLQ%{group} (the one a resend of all moves) past the dead letters; "
        "never back. The letters stay stored (and listed) until retention deletes them; a resend of "
        "all starts after them."
    ),
    responses={400: {"model": ErrorEnvelope}},
)
async def skip_dead_letters(group: GroupName, body: SkipRequest, broker: BrokerDep) -> dict[str, Any]:
    if (body.through_offset is not None) == body.all:
        raise ApiError(ErrorCode.BAD_REQUEST, 'give either "through_offset" or "all": true')
    skipped, mark = await asyncio.to_thread(dead_letter.skip, broker, group, body.through_offset)
    return {"group": group, "skipped": skipped, "resent_until": mark}
