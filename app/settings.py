"""Wharf's configuration: one settings object, read once from WHARF_* environment variables."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.address import is_wildcard, reachable_ipv4
from app.store.config import FlushMode, StoreConfig
from app.store.record_format import parse_delay_levels

# StoreConfig's defaults are the one source of every storage default: a storage setting below names
# its field and adds only its bounds. Every StoreConfig field has a same-named setting, except these,
# which come from other settings (store_config()); tests/store/test_store_settings.py holds both to it.
STORE_DEFAULTS: dict[str, Any] = {
    field.name: field.default
    for field in dataclasses.fields(StoreConfig)
    if field.default is not dataclasses.MISSING
}
DERIVED_STORE_FIELDS = frozenset({"store_dir", "store_host", "store_port"})


def _store_default(name: str, **bounds: Any) -> Any:
    """The setting of StoreConfig field ``name``: its default, with ``bounds`` (ge=, le=, pattern=)."""
    return Field(STORE_DEFAULTS[name], **bounds)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WHARF_", frozen=True, extra="ignore")

    # Server.
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    log_format: Literal["text", "json"] = "text"  # json: one JSON object per line (app/logs.py)
    access_log: bool = False  # a line per HTTP request and per WebSocket handshake
    # From the signal to the exit: draining connections, then closing the store (app/server.py).
    shutdown_timeout_s: float = Field(10.0, gt=0)

    # Where things live.
    store_dir: Path = Path("data")
    # Empty: sqlite:///<store_dir>/wharf.db. Kept out of the settings' repr: it may hold a password.
    database_url: str = Field("", repr=False)

    # Routing identity (SPEC 2).
    cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = Field(0, ge=0)
    # Replication: a SLAVE has its master's broker name and an id >= 1; it copies the
    # master's CommitLog, found in the route registry (same name, id 0) or at ha_master_url.
    broker_role: Literal["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"] = "ASYNC_MASTER"
    ha_master_url: str = ""
    # SYNC_MASTER: a produce not held by an in-sync slave by then answers FLUSH_SLAVE_TIMEOUT.
    ha_sync_timeout_ms: int = Field(3000, ge=1, le=600_000)
    # A slave's account on its master when the master has an ACL (admin: it reads the CommitLog).
    ha_access_key: str = ""
    ha_secret_key: str = ""
    # A slave asks for its master's topics and offsets again after this long without a change.
    ha_metadata_interval_ms: int = Field(10_000, ge=100, le=600_000)
    # Failover, with the route registry as the controller: a slave in sync with a master silent
    # for ha_failover_s promotes itself; a master whose lease in the registry lapses (half of
    # ha_failover_s without renewing it) takes no writes.
    ha_auto_failover: bool = False
    ha_failover_s: float = Field(10.0, ge=1, le=3600)
    advertised_url: str = ""  # empty: http://<host>:<port>, a reachable address when host is a wildcard
    heartbeat_interval_s: float = Field(30.0, gt=0)
    broker_expiry_s: float = Field(120.0, gt=0)
    # A group member silent this long is dropped and its queues go to the others (RocketMQ: 120 s).
    consumer_expiry_s: float = Field(30.0, gt=0)
    # A heartbeat of a new member past this many members of its group is refused (409, 40906).
    max_group_members: int = Field(1000, ge=1)
    # A group's messages are consumed again at most this often before they go to %DLQ%<group>
    # (RocketMQ's maxReconsumeTimes); PUT /v1/groups/{group}/config changes it per group.
    max_reconsume_times: int = Field(16, ge=0, le=1000)
    # An ordered member's lock on a queue lives this long after its last renewal (RocketMQ's
    # REBALANCE_LOCK_MAX_LIVE_TIME; members renew every 20 s).
    lock_expiry_s: float = Field(60.0, gt=0)
    # An ordered queue whose message failed waits this long before it is handed out again
    # (RocketMQ's suspendCurrentQueueTimeMillis).
    orderly_suspend_ms: int = Field(1000, ge=0, le=3_600_000)
    expiry_scan_interval_s: float = Field(10.0, gt=0)
    # Push subscriptions (docs/guides/push.md): endpoints on loopback, link-local or private
    # addresses are refused unless this is true; at most push_max_subscriptions per broker; a failing
    # endpoint is tried again after an exponential back-off from push_backoff_min_ms up to
    # push_backoff_max_ms, and a Retry-After on a 429 or 503 is honoured up to push_retry_after_max_s.
    push_allow_private: bool = False
    push_max_subscriptions: int = Field(1000, ge=0, le=100_000)
    push_backoff_min_ms: int = Field(100, ge=1, le=3_600_000)
    push_backoff_max_ms: int = Field(60_000, ge=1, le=3_600_000)
    push_retry_after_max_s: float = Field(3600.0, ge=0, le=86_400)
    database_auto_upgrade: bool = True
    database_timeout_s: float = Field(5.0, gt=0)

    # Storage (SPEC 1).
    flush_mode: FlushMode = _store_default("flush_mode")
    commitlog_file_size: int = _store_default("commitlog_file_size", ge=4096)
    consumequeue_file_entries: int = _store_default("consumequeue_file_entries", ge=1)
    commitlog_chunk_size: int = _store_default("commitlog_chunk_size", ge=4096)
    consumequeue_chunk_size: int = _store_default("consumequeue_chunk_size", ge=4096)
    max_mapped_segments: int = _store_default("max_mapped_segments", ge=0)
    max_message_size: int = _store_default("max_message_size", ge=1)
    max_topic_length: int = _store_default("max_topic_length", ge=1, le=255)
    max_properties_size: int = _store_default("max_properties_size", ge=0, le=32_767)
    sync_flush_timeout_ms: int = _store_default("sync_flush_timeout_ms", ge=1)
    group_commit_interval_ms: int = _store_default("group_commit_interval_ms", ge=1)
    flush_interval_commitlog_ms: int = _store_default("flush_interval_commitlog_ms", ge=1)
    flush_commitlog_least_pages: int = _store_default("flush_commitlog_least_pages", ge=0)
    flush_commitlog_thorough_interval_ms: int = _store_default("flush_commitlog_thorough_interval_ms", ge=1)
    flush_interval_consumequeue_ms: int = _store_default("flush_interval_consumequeue_ms", ge=1)
    flush_consumequeue_least_pages: int = _store_default("flush_consumequeue_least_pages", ge=0)
    flush_consumequeue_thorough_interval_ms: int = _store_default(
        "flush_consumequeue_thorough_interval_ms", ge=1
    )
    max_scan_bytes_per_pull: int = _store_default("max_scan_bytes_per_pull", ge=20)
    max_transfer_bytes_per_pull: int = _store_default("max_transfer_bytes_per_pull", ge=1)
    access_message_in_memory_max_ratio: float = _store_default(
        "access_message_in_memory_max_ratio", ge=0, le=100
    )

    # Message index (SPEC 1.6).
    message_index_enable: bool = _store_default("message_index_enable")
    max_hash_slots: int = _store_default("max_hash_slots", ge=1)
    max_index_count: int = _store_default("max_index_count", ge=2)
    flush_interval_index_ms: int = _store_default("flush_interval_index_ms", ge=1)
    max_index_query_results: int = _store_default("max_index_query_results", ge=1)

    # Retention and the disk guard (SPEC 1.9); ratios are percent of the store's partition.
    file_reserved_time_h: int = _store_default("file_reserved_time_h", ge=0)
    delete_when: str = _store_default("delete_when", pattern=r"^\s*\d{1,2}(\s*;\s*\d{1,2})*\s*;?\s*$")
    disk_max_used_space_ratio: int = _store_default("disk_max_used_space_ratio", ge=0, le=100)
    disk_force_clean_ratio: int = _store_default("disk_force_clean_ratio", ge=0, le=100)
    disk_refuse_writes_ratio: int = _store_default("disk_refuse_writes_ratio", ge=0, le=100)
    disk_accept_writes_ratio: int = _store_default("disk_accept_writes_ratio", ge=0, le=100)
    disk_check_interval_ms: int = _store_default("disk_check_interval_ms", ge=1)
    clean_resource_interval_ms: int = _store_default("clean_resource_interval_ms", ge=1)
    clean_first_delay_ms: int = _store_default("clean_first_delay_ms", ge=0)
    delete_files_max_per_pass: int = _store_default("delete_files_max_per_pass", ge=1)
    delete_files_interval_ms: int = _store_default("delete_files_interval_ms", ge=0)
    destroy_forcibly_interval_ms: int = _store_default("destroy_forcibly_interval_ms", ge=0)

    # Consumer offsets (SPEC 4).
    consumer_offset_persist_interval_ms: int = _store_default("consumer_offset_persist_interval_ms", ge=1)
    # RocketMQ's messageDelayLevel: the 18 delay levels (delayed messages, and a sent-back message's
    # retry after level 3 + its reconsume times), "1s 5s 10s 30s 1m ... 1h 2h".
    message_delay_level: str = _store_default("message_delay_level")

    @field_validator("message_delay_level")
    @classmethod
    def _check_delay_levels(cls, value: str) -> str:
        parse_delay_levels(value)
        return value

    # Topics (SPEC 3).
    auto_create_topics: bool = True
    default_topic_queue_nums: int = Field(4, ge=1, le=1024)

    # Delayed delivery (docs/guides/delayed.md): the furthest a delay_ms or deliver_at_ms may
    # reach (3 days), how often the delivery progress is saved (delayOffset.json, the timer's
    # checkpoint), and how long a timer message waits before it is stored again - less than the
    # CommitLog's retention (file_reserved_time_h), so that retention never takes a pending message.
    max_delay_ms: int = Field(3 * 86_400_000, ge=1)
    delay_offset_persist_interval_ms: int = Field(10_000, ge=0)
    timer_roll_window_ms: int = Field(86_400_000, ge=1_000)
    # Transactional messages (RocketMQ's transactionTimeOut, transactionCheckInterval and
    # transactionCheckMax): an open transaction is first checked this long after its begin, then
    # every interval, and rolled back after the last check.
    transaction_timeout_s: float = Field(6.0, gt=0)
    transaction_check_interval_s: float = Field(60.0, gt=0)
    transaction_check_max: int = Field(15, ge=0)
    # Most transactions open at once on this broker: a begin past it is refused (429, 42901).
    max_open_transactions: int = Field(100_000, ge=1)

    # HTTP API and long polling (SPEC 4).
    max_request_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    pull_default_messages: int = Field(32, ge=1)
    pull_max_messages: int = Field(10_000, ge=1)
    max_wait_ms: int = Field(30_000, ge=0)
    hold_check_interval_ms: int = Field(5_000, ge=10)
    idempotency_window_s: int = Field(300, ge=0)
    idempotency_max_entries: int = Field(1_000_000, ge=0)
    # Produce and pull requests of the common shapes served below the framework (app.api.fast_lane);
    # off, every request goes through the whole app. CORS or the ACL configured turn it off.
    fast_lane: bool = True

    # WebSocket subscriptions and produce (docs/reference/websocket.md).
    ws_max_credit: int = Field(10_000, ge=1)
    ws_batch_messages: int = Field(32, ge=1)
    ws_max_unacked: int = Field(1_000, ge=1)
    ws_hold_ms: int = Field(30_000, ge=100)
    ws_produce_max_pending: int = Field(1_000, ge=1)

    # WebSocket bounds against slow, silent and hostile clients (docs/reference/websocket.md, "Bounds").
    # Bytes of encoded frames a socket may have waiting for, or being handed to, its client.
    ws_max_queued_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    # A frame the client does not take within this long closes the socket (1013).
    ws_send_timeout_s: float = Field(30.0, gt=0)
    # A subscriber the broker waits on (no credit, or its unacked limit reached) that sends no
    # frame for this long is closed (1008).
    ws_idle_timeout_s: float = Field(60.0, gt=0)
    # Largest client frame on /v1/ws/subscribe, and on /v1/ws/produce (one message per frame).
    ws_max_frame_bytes: int = Field(1024 * 1024, ge=1024)
    ws_produce_max_frame_bytes: int = Field(8 * 1024 * 1024, ge=1024)

    # Server-Sent Events, GET /v1/topics/{topic}/events (docs/guides/browser.md).
    # A ": ping" comment after this long without an event, so proxies keep the stream open.
    sse_heartbeat_s: float = Field(15.0, gt=0)
    sse_retry_ms: int = Field(3_000, ge=0)  # the "retry:" a client waits before it reconnects
    # Bytes of encoded events a stream may have waiting for, or being handed to, its client.
    sse_max_queued_bytes: int = Field(1024 * 1024, ge=1024)
    # A write the client does not take within this long closes the stream.
    sse_send_timeout_s: float = Field(30.0, gt=0)

    # Authentication and ACL (docs/guides/security.md): RocketMQ's plain_acl.yml. Empty: off.
    acl_file: str = ""
    acl_reload_interval_ms: int = Field(1_000, ge=0)  # how often a request looks for a changed file
    # The edge: what one client may cost, CORS and TLS (docs/guides/security.md, "Limits and the edge").
    max_admin_request_bytes: int = Field(1024 * 1024, ge=1024)  # every body but produce's
    max_url_bytes: int = Field(8 * 1024, ge=256)
    max_header_bytes: int = Field(16 * 1024, ge=1024)
    header_timeout_s: float = Field(10.0, gt=0)
    keep_alive_timeout_s: float = Field(5.0, gt=0)
    max_connections: int = Field(0, ge=0)  # 0: from the open-file limit at start
    cors_origins: str = ""  # comma-separated origins, e.g. https://console.example.com
    tls_certfile: str = ""
    tls_keyfile: str = ""
    # Peers whose X-Forwarded-For (and -Proto) name the client: comma-separated IPs or networks, or
    # "*"; uvicorn's forwarded_allow_ips. The client is the born host of what it produces.
    forwarded_allow_ips: str = "127.0.0.1"

    # Recovery after a clean stop (docs/guides/operating/configuration.md, "Configuration: recovery"): trailing CommitLog segments
    # walked to find the end of the log.
    recover_segments_normal: int = _store_default("recover_segments_normal", ge=1)

    @property
    def cors_origin_list(self) -> list[str]:
        return [origin.strip().rstrip("/") for origin in self.cors_origins.split(",") if origin.strip()]

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.store_dir / 'wharf.db'}"

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("advertised_url")
    @classmethod
    def _reachable_advertised_url(cls, value: str) -> str:
        if not value:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an http:// or https:// URL with a host, e.g. http://10.0.0.7:8080")
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
        if is_wildcard(parts.hostname):
            raise ValueError("an address clients can reach, not a wildcard such as 0.0.0.0")
        return value

    @model_validator(mode="after")
    def _slave_has_an_id(self) -> Settings:
        if self.broker_role == "SLAVE" and self.broker_id < 1:
            raise ValueError("a SLAVE needs WHARF_BROKER_ID >= 1 (id 0 is its master)")
        return self

    @property
    def resolved_advertised_url(self) -> str:
        """WHARF_ADVERTISED_URL, else http(s)://<host>:<port>; when the host is a wildcard (0.0.0.0, ::)
        an address of this machine instead (app.address), since ids and routes must be reachable."""
        if self.advertised_url:
            return self.advertised_url
        host = reachable_ipv4() if is_wildcard(self.host) else self.host
        scheme = "https" if self.tls_certfile else "http"
        return f"{scheme}://[{host}]:{self.port}" if ":" in host else f"{scheme}://{host}:{self.port}"

    def store_config(self) -> StoreConfig:
        """The store's settings: every StoreConfig field from the same-named setting, the store's
        directory, and the address written into message ids from the advertised URL."""
        advertised = urlsplit(self.resolved_advertised_url)
        values = {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(StoreConfig)
            if field.name not in DERIVED_STORE_FIELDS
        }
        return StoreConfig(
            store_dir=self.store_dir,
            store_host=advertised.hostname or self.host,
            store_port=advertised.port or self.port,
            **values,
        )
