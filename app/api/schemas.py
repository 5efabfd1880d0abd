"""Request and response shapes of the HTTP API (validation and the OpenAPI document)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from app.broker.topic_admin import MAX_BULK_TOPICS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MessageIn(_Strict):
    body: str = Field(description="The message body, as text or base64 (see encoding).")
    encoding: Literal["utf8", "base64"] = "utf8"
    tags: str | None = Field(None, max_length=1024, description="One tag, used for filtering.")
    keys: list[str] | str | None = Field(None, description="Business keys, indexed for lookup.")
    properties: dict[str, str] | None = None
    queue_id: int | None = Field(
        None, ge=0, description="Explicit queue; else sharding_key; else round robin."
    )
    sharding_key: str | None = Field(
        None,
        max_length=1024,
        description="Messages with one key go to one queue: abs(Java String.hashCode(key)) % write queues, "
        "as RocketMQ's SelectMessageQueueByHash",
    )
    unique_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="Producer id; a repeat within the idempotency window is not stored again.",
    )
    # Ranges are checked by the broker (a 400 naming the limit), so they are documented, not enforced.
    delay_level: int | None = Field(
        None,
        description="Deliver after a fixed delay, level 1-18: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m "
        "10m 20m 30m 1h 2h. At most one of delay_level, delay_ms, deliver_at_ms.",
        json_schema_extra={"minimum": 1, "maximum": 18},
    )
    delay_ms: int | None = Field(
        None,
        description="Deliver this many milliseconds from now, at most WHARF_MAX_DELAY_MS (3 days).",
        json_schema_extra={"minimum": 0},
    )
    deliver_at_ms: int | None = Field(
        None,
        description="Deliver at this time (epoch ms), at most WHARF_MAX_DELAY_MS ahead; a past time is now.",
        json_schema_extra={"minimum": 0},
    )

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"body": "hello", "tags": "TagA", "keys": ["order-1"]},
                {"body": "close order-1 if unpaid", "delay_level": 16},
            ]
        },
    )


class ProduceRequest(_Strict):
    messages: list[MessageIn] = Field(min_length=1, max_length=10_000)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"messages": [{"body": "hello", "tags": "TagA"}, {"body": "aGk=", "encoding": "base64"}]}
            ]
        },
    )


class ProduceResult(BaseModel):
    msg_id: str
    unique_id: str
    queue_id: int
    queue_offset: int | None = Field(
        description="null for a delayed message, until it is delivered, and for a half message."
    )
    status: Literal["SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"] = Field(
        description="SEND_OK: stored (and, under SYNC_MASTER, held by an in-sync slave). The others: "
        "stored, but not flushed in time, or not held by a slave in WHARF_HA_SYNC_TIMEOUT_MS, or no "
        "slave is connected."
    )
    deliver_at_ms: int | None = Field(None, description="A delayed message: when it is due (epoch ms).")
    transaction_id: str | None = Field(
        None, description="transaction=begin: commit or roll back with it (the half message's id)."
    )


class ProduceResponse(BaseModel):
    results: list[ProduceResult]


class MessageOut(BaseModel):
    msg_id: str
    unique_id: str
    topic: str
    queue_id: int
    queue_offset: int
    tags: str
    keys: list[str]
    properties: dict[str, str]
    body: str
    encoding: Literal["utf8", "base64"]
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int


class PullResponse(BaseModel):
    status: Literal[
        "FOUND",
        "NO_MATCHED_MESSAGE",
        "NO_MESSAGE_IN_QUEUE",
        "OFFSET_TOO_SMALL",
        "OFFSET_OVERFLOW_ONE",
        "OFFSET_OVERFLOW_BADLY",
    ]
    next_offset: int
    min_offset: int
    max_offset: int
    suggest_broker_id: int = Field(
        0,
        description="The broker id of this broker name to pull from next: a slave's when this "
        "consumer reads further behind than the page cache holds "
        "(WHARF_ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO), else 0, the master",
    )
    messages: list[MessageOut]


class TopicSpec(_Strict):
    name: str = Field(min_length=1, max_length=127, pattern=r"^[%|a-zA-Z0-9_-]+$")
    queues: int | None = Field(None, ge=1, le=1024, description="Read and write queue numbers at once.")
    read_queues: int | None = Field(None, ge=1, le=1024)
    write_queues: int | None = Field(None, ge=1, le=1024)
    perm: int = Field(6, ge=0, le=7, description="RocketMQ permission bits: 4 read, 2 write (6 both).")
    order: bool = False


class TopicUpdate(_Strict):
    """A change of a topic's queue numbers, permission or order flag; a field left out keeps its value."""

    queues: int | None = Field(None, ge=1, le=1024, description="Read and write queue numbers at once.")
    read_queues: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Never fewer than the write queues: a queue written but not read is lost.",
    )
    write_queues: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Fewer: the dropped queues take no more writes; their messages stay readable.",
    )
    perm: int | None = Field(
        None, ge=0, le=7, description="RocketMQ permission bits: 4 read, 2 write (6 both)."
    )
    order: bool | None = None

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"read_queues": 8, "write_queues": 8}, {"write_queues": 2}, {"perm": 4}]
        },
    )


class TopicCreate(TopicSpec):
    cluster: str | None = Field(
        None, description="Create the topic's queues on every master of this cluster."
    )
    brokers: list[str] | None = Field(
        None, description="Create the topic's queues on these brokers (by name)."
    )

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"name": "orders", "queues": 4}, {"name": "orders", "cluster": "DefaultCluster"}]
        },
    )


class TopicBulkCreate(_Strict):
    topics: list[TopicSpec] = Field(
        min_length=1,
        description=f"Topics to create on this broker, at most {MAX_BULK_TOPICS}; each like a single create "
        "(without cluster or brokers).",
    )

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"topics": [{"name": "orders", "queues": 8}, {"name": "payments"}]}]},
    )


def _create_kind(value: Any) -> str:
    return "bulk" if isinstance(value, dict) and "topics" in value else "one"


TopicCreateBody = Annotated[
    Annotated[TopicCreate, Tag("one")] | Annotated[TopicBulkCreate, Tag("bulk")],
    Discriminator(_create_kind),
]


class TopicPlacement(BaseModel):
    broker_name: str
    address: str
    status: int = Field(description="HTTP status the broker answered (201 created, 200 already there)")
    error: str | None = None


class TopicOut(BaseModel):
    name: str
    read_queues: int
    write_queues: int
    perm: int
    order: bool
    brokers: list[TopicPlacement] | None = Field(
        None, description="Where the topic was created, for a cluster create"
    )


class TopicList(BaseModel):
    topics: list[TopicOut]
    next_cursor: str | None = Field(
        None, description="Pass as cursor for the next page; absent on the last page."
    )


class TopicError(BaseModel):
    error_code: int
    message: str


class TopicBulkResult(BaseModel):
    name: str
    status: int = Field(
        description="201 created, 200 already there with this configuration, else the error's status"
    )
    topic: TopicOut | None = None
    error: TopicError | None = None


class TopicBulkResponse(BaseModel):
    results: list[TopicBulkResult] = Field(description="One per requested topic, in request order")
    created: int
    existing: int
    failed: int


class QueueOffsets(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp: int | None
    produce_rate_per_s: float | None = Field(
        None,
        description="Messages stored per second over `rate_window_s`, from the offsets sampled by "
        "earlier requests; null on a first request",
    )


class QueueList(BaseModel):
    topic: str
    queues: list[QueueOffsets]
    rate_window_s: float = Field(
        0.0, description="The seconds the rates cover (at most 60): since the oldest sample kept; 0: none yet"
    )


class SearchOffsetResponse(BaseModel):
    topic: str
    queue_id: int
    timestamp: int
    offset: int


class OffsetCommit(_Strict):
    topic: str = Field(min_length=1, max_length=127)
    queue_id: int = Field(ge=0)
    offset: int = Field(ge=0)


class OffsetCommitRequest(_Strict):
    offsets: list[OffsetCommit] = Field(min_length=1, max_length=10_000)
    client_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        pattern=r"^[a-zA-Z0-9_.:-]+$",
        description="A member's commit: only queues it owns in `generation` (else 409); without it, "
        "an administrative set of the offsets",
    )
    generation: int | None = Field(None, description="The generation of the member's last heartbeat")

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"offsets": [{"topic": "orders", "queue_id": 0, "offset": 42}]}]},
    )


class GroupQueueOffset(BaseModel):
    topic: str
    queue_id: int
    committed_offset: int | None
    max_offset: int
    lag: int


class GroupOffsets(BaseModel):
    group: str
    offsets: list[GroupQueueOffset]


class ErrorEnvelope(BaseModel):
    error_code: int = Field(description="HTTP status x 100 + a detail number; see the error table.")
    message: str
    owner: str | None = Field(
        None, description="40404 for an id of another broker: that broker's host:port, to ask instead"
    )
    brokers: list[str] | None = Field(
        None, description="42101: the addresses of the brokers that host the topic, to send to instead"
    )
    topic: str | None = Field(None, description="40014: the topic of the offset out of range")
    queue_id: int | None = Field(None, description="40014: the queue of the offset out of range")
    min_offset: int | None = Field(None, description="40014: the queue's first offset")
    max_offset: int | None = Field(None, description="40014: the queue's offset after its last message")

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"error_code": 40402, "message": "topic 'x' not found"}]}
    )


class QueueData(BaseModel):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int


class BrokerData(BaseModel):
    cluster: str
    broker_name: str
    addresses: dict[str, str] = Field(description="broker id -> address; id 0 is the master")


class TopicRoute(BaseModel):
    topic: str
    queue_datas: list[QueueData]
    broker_datas: list[BrokerData]


class ClusterBroker(BaseModel):
    broker_name: str
    broker_id: int
    address: str
    ha_address: str
    last_heartbeat_ms: int
    alive: bool
    data_version: int


class Cluster(BaseModel):
    name: str
    brokers: list[ClusterBroker]


class ClusterList(BaseModel):
    clusters: list[Cluster]


class GroupSummary(BaseModel):
    group: str
    topics: list[str]


class GroupList(BaseModel):
    groups: list[GroupSummary]
    next_cursor: str | None = Field(
        None, description="Pass as cursor for the next page; absent on the last page."
    )


class MessageList(BaseModel):
    topic: str
    key: str
    messages: list[MessageOut]


class CleanReportOut(BaseModel):
    disk_used_percent: float
    reasons: list[str]
    forced: bool
    commitlog_segments: int
    consumequeue_segments: int
    index_files: int
    commitlog_min_offset: int


class HealthStatus(BaseModel):
    status: Literal["ok"]


class ReadyStatus(BaseModel):
    status: Literal["ready"]


class BrokerStats(BaseModel):
    held_pulls: int = Field(description="Pulls held waiting for a message")
    topics: int
    commitlog_min_offset: int
    commitlog_max_offset: int
