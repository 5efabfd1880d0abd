"""The one error envelope, ``{"error_code": 40402, "message": "..."}``, and every code Wharf answers.

The HTTP status is always ``error_code // 100``. Store and route registry faults are translated in
one table, :data:`STORE_ERRORS`, the broker core's refusals in another, :data:`BROKER_ERRORS`; a test
fails when a store or a core error class is missing from its table.
"""

from __future__ import annotations

import enum
import logging

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from app.broker import errors as broker_errors
from app.routing.errors import RegistryUnavailableError
from app.store import errors as store_errors
from app.store.filter import FilterExpressionError

log = logging.getLogger(__name__)


class ErrorCode(enum.IntEnum):
    BAD_REQUEST = 40001
    MALFORMED_BODY = 40002
    INVALID_BODY_ENCODING = 40003
    INVALID_TAG_EXPRESSION = 40004
    INVALID_TOPIC = 40005
    EMPTY_BODY = 40006
    INVALID_OFFSET = 40007
    INVALID_PROPERTY = 40008
    INVALID_MESSAGE_ID = 40009
    MALFORMED_BATCH = 40010
    INVALID_QUEUE = 40011
    INVALID_PARAMETER = 40012
    INVALID_CURSOR = 40013
    OFFSET_OUT_OF_RANGE = 40014
    INVALID_FILTER_EXPRESSION = 40015
    INVALID_CLOUDEVENT = 40016
    UNAUTHORIZED = 40101
    FORBIDDEN = 40301
    ORIGIN_NOT_ALLOWED = 40305
    NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    QUEUE_NOT_FOUND = 40403
    MESSAGE_NOT_FOUND = 40404
    GROUP_NOT_FOUND = 40405
    CLUSTER_NOT_FOUND = 40406
    MEMBER_NOT_FOUND = 40407
    TRANSACTION_NOT_FOUND = 40408
    RECEIPT_HANDLE_NOT_FOUND = 40410
    METHOD_NOT_ALLOWED = 40501
    NOT_ACCEPTABLE = 40601
    REQUEST_TIMEOUT = 40801
    WS_CLIENT_IDLE = 40810
    WS_CLIENT_TOO_SLOW = 40811
    TOPIC_EXISTS = 40901
    TOPIC_NOT_WRITABLE = 40902
    TOPIC_NOT_READABLE = 40903
    GENERATION_FENCED = 40904
    GROUP_CONFLICT = 40905
    GROUP_FULL = 40906
    RECEIPT_HANDLE_EXPIRED = 40910
    TRANSACTION_ENDED = 40920
    QUEUE_NOT_LOCKED = 40930
    PROMOTION_REFUSED = 40940
    MASTER_ALIVE = 40941
    TOO_MANY_PUSH_SUBSCRIPTIONS = 40950
    MESSAGE_TOO_LARGE = 41301
    PROPERTIES_TOO_LARGE = 41302
    REQUEST_TOO_LARGE = 41303
    TOO_MANY_ITEMS = 41304
    WS_FRAME_TOO_LARGE = 41310
    URI_TOO_LONG = 41401
    UNSUPPORTED_MEDIA_TYPE = 41501
    MISDIRECTED = 42101
    VALIDATION_FAILED = 42201
    TOO_MANY_OPEN_TRANSACTIONS = 42901
    HEADERS_TOO_LARGE = 43101
    INTERNAL_ERROR = 50001
    NOT_READY = 50301
    STORE_CLOSED = 50302
    REGISTRY_UNAVAILABLE = 50303
    RESOURCES_EXHAUSTED = 50304
    TOO_MANY_CONNECTIONS = 50305
    DISK_FULL = 50701

    @property
    def http_status(self) -> int:
        return int(self) // 100


ERROR_DESCRIPTIONS: dict[ErrorCode, str] = {
    ErrorCode.BAD_REQUEST: "The request is malformed.",
    ErrorCode.MALFORMED_BODY: "The body is not valid JSON / NDJSON of the expected shape.",
    ErrorCode.INVALID_BODY_ENCODING: "A message body does not decode with its declared encoding.",
    ErrorCode.INVALID_TAG_EXPRESSION: "The tag filter expression is not valid ('TagA || TagB' or '*').",
    ErrorCode.INVALID_TOPIC: "The topic name is empty, too long or has characters outside letters, digits, % | - _.",
    ErrorCode.EMPTY_BODY: "A message body is empty.",
    ErrorCode.INVALID_OFFSET: "An offset is negative or not a number.",
    ErrorCode.INVALID_PROPERTY: "A property name or value is empty or holds a reserved character.",
    ErrorCode.INVALID_MESSAGE_ID: "The message id is not 32 hexadecimal digits.",
    ErrorCode.MALFORMED_BATCH: "The binary batch does not follow the documented layout.",
    ErrorCode.INVALID_QUEUE: "The queue id is outside the topic's queues.",
    ErrorCode.INVALID_PARAMETER: "A query parameter is out of range.",
    ErrorCode.INVALID_CURSOR: "The cursor is not a next_cursor this list answered.",
    ErrorCode.OFFSET_OUT_OF_RANGE: (
        "A committed offset is outside the queue's [min_offset, max_offset]; nothing was committed."
        " The answer carries topic, queue_id, min_offset and max_offset."
    ),
    ErrorCode.INVALID_FILTER_EXPRESSION: (
        "The SQL92 filter expression does not parse; the answer carries the line and column (from 1)"
        " where it goes wrong."
    ),
    ErrorCode.INVALID_CLOUDEVENT: (
        "A CloudEvent is not valid CloudEvents 1.0: a required attribute (specversion, id, source,"
        " type) is missing or empty, specversion is not 1.0, or an attribute or its data is malformed;"
        " the message names it."
    ),
    ErrorCode.UNAUTHORIZED: (
        "Credentials are missing or wrong: send Authorization: Basic base64(accessKey:secretKey)"
        " (a WebSocket may send ?token=base64url(accessKey:secretKey) instead)."
    ),
    ErrorCode.FORBIDDEN: "The account lacks the permission the request needs (ACL); nothing was changed.",
    ErrorCode.ORIGIN_NOT_ALLOWED: (
        "A WebSocket handshake came from a web page whose Origin is neither the broker's own nor one of "
        "WHARF_CORS_ORIGINS."
    ),
    ErrorCode.NOT_FOUND: "No such path.",
    ErrorCode.TOPIC_NOT_FOUND: "The topic does not exist.",
    ErrorCode.QUEUE_NOT_FOUND: "The queue does not exist in the topic.",
    ErrorCode.MESSAGE_NOT_FOUND: "No message has that id or key; an id of another broker names it in `owner`.",
    ErrorCode.GROUP_NOT_FOUND: "The consumer group has no offsets.",
    ErrorCode.CLUSTER_NOT_FOUND: "No live master broker in the named cluster or broker list.",
    ErrorCode.MEMBER_NOT_FOUND: (
        "The client is not a member of the group (it never joined, left, or was silent past "
        "WHARF_CONSUMER_EXPIRY_S): send a heartbeat first."
    ),
    ErrorCode.RECEIPT_HANDLE_NOT_FOUND: (
        "The receipt handle names no message the group popped from the topic (never handed out, of "
        "another group or topic, or not a receipt handle)."
    ),
    ErrorCode.TRANSACTION_NOT_FOUND: (
        "The transaction id names no transaction on this broker (never begun here, or no longer stored)."
    ),
    ErrorCode.METHOD_NOT_ALLOWED: "The path does not accept that method.",
    ErrorCode.NOT_ACCEPTABLE: "The Accept header asks for a format this path cannot produce.",
    ErrorCode.WS_CLIENT_IDLE: (
        "WebSocket close 1008: the broker waited on the client (no credit left, or its unacked limit"
        " reached) and no frame came within WHARF_WS_IDLE_TIMEOUT_S."
    ),
    ErrorCode.WS_CLIENT_TOO_SLOW: (
        "WebSocket close 1013: the client did not take a frame within WHARF_WS_SEND_TIMEOUT_S while"
        " WHARF_WS_MAX_QUEUED_BYTES waited for it; unacknowledged messages come again."
    ),
    ErrorCode.REQUEST_TIMEOUT: (
        "The request's headers did not arrive within WHARF_HEADER_TIMEOUT_S; the connection is closed."
    ),
    ErrorCode.TOPIC_EXISTS: "A topic with that name exists with a different configuration.",
    ErrorCode.TOPIC_NOT_WRITABLE: "The topic's permission forbids producing.",
    ErrorCode.TOPIC_NOT_READABLE: "The topic's permission forbids pulling.",
    ErrorCode.GENERATION_FENCED: (
        "The commit names an older generation of the group, or a queue the member does not own in the "
        "current one; nothing was committed. The answer carries the current generation."
    ),
    ErrorCode.GROUP_CONFLICT: (
        "The group's other members consume with another model, allocation strategy or consume mode; "
        "nothing was changed."
    ),
    ErrorCode.GROUP_FULL: "The group has as many members as WHARF_MAX_GROUP_MEMBERS allows; nothing was changed.",
    ErrorCode.RECEIPT_HANDLE_EXPIRED: (
        "The receipt handle is not the message's latest: the message was acked, handed out again, "
        "nacked or given another invisible time since; nothing was changed."
    ),
    ErrorCode.TRANSACTION_ENDED: (
        "The transaction was committed or rolled back already; nothing was changed. The answer carries "
        "transaction_id and state (COMMITTED, ROLLED_BACK, or null when no longer known)."
    ),
    ErrorCode.QUEUE_NOT_LOCKED: (
        "An ordered member committed a queue whose lock it does not hold (it expired, was released, or "
        "another member holds it): nothing was committed; lock the queue again (POST /v1/groups/{group}/locks)."
    ),
    ErrorCode.PROMOTION_REFUSED: (
        "The broker is its name's master already, or another broker of its name was promoted first "
        "(the epoch moved on); nothing was changed."
    ),
    ErrorCode.MASTER_ALIVE: (
        "A manual promotion of a slave whose master is alive: its lease in the route registry is "
        "current (it ends `lease_ends_in_ms` from now, on the slave's clock), or, without a registry, "
        "the slave is connected to it. `master_url` names it; nothing was changed. Stop the master "
        "and wait for the lease to end, or promote with `force=true`."
    ),
    ErrorCode.TOO_MANY_PUSH_SUBSCRIPTIONS: (
        "A new push subscription would pass the broker's cap on them (WHARF_PUSH_MAX_SUBSCRIPTIONS); "
        "nothing was created."
    ),
    ErrorCode.MESSAGE_TOO_LARGE: "A message body is over the maximum message size.",
    ErrorCode.PROPERTIES_TOO_LARGE: "A message's encoded properties are over 32,767 bytes.",
    ErrorCode.REQUEST_TOO_LARGE: (
        "The request body is over its limit (WHARF_MAX_REQUEST_BYTES for produce, "
        "WHARF_MAX_ADMIN_REQUEST_BYTES for the rest); nothing of it was used and the connection is closed."
    ),
    ErrorCode.TOO_MANY_ITEMS: "A bulk request lists more items than its cap (1,000 topics per create).",
    ErrorCode.WS_FRAME_TOO_LARGE: (
        "WebSocket close 1009: a client frame is over WHARF_WS_MAX_FRAME_BYTES"
        " (WHARF_WS_PRODUCE_MAX_FRAME_BYTES on /v1/ws/produce)."
    ),
    ErrorCode.URI_TOO_LONG: "The request's URL is over WHARF_MAX_URL_BYTES; the connection is closed.",
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: (
        "The Content-Type is missing or not one the path accepts (JSON bodies: application/json)."
    ),
    ErrorCode.MISDIRECTED: (
        "This broker does not host the topic (`brokers` lists the addresses of those that do), or it is a "
        "slave, which takes no writes (`brokers` names its master when it knows it)."
    ),
    ErrorCode.VALIDATION_FAILED: "A field has the wrong type or is missing.",
    ErrorCode.TOO_MANY_OPEN_TRANSACTIONS: (
        "As many transactions are open as WHARF_MAX_OPEN_TRANSACTIONS allows; nothing was stored. "
        "Commit or roll back open ones, then begin again."
    ),
    ErrorCode.HEADERS_TOO_LARGE: (
        "The request's headers are over WHARF_MAX_HEADER_BYTES (or, for a WebSocket handshake, a header "
        "line is over 8,192 bytes or there are more than 128); the connection is closed."
    ),
    ErrorCode.INTERNAL_ERROR: "An unexpected fault; it is logged. Please report it.",
    ErrorCode.NOT_READY: "The broker is starting or stopping.",
    ErrorCode.STORE_CLOSED: "The store is closed.",
    ErrorCode.REGISTRY_UNAVAILABLE: "The route registry's database cannot be reached: routes, clusters, topic "
    "creation and deletion, and unknown topics wait for it; produce and pull on this broker's topics go on.",
    ErrorCode.RESOURCES_EXHAUSTED: (
        "The broker is out of open files or memory mappings: nothing of the request was stored; retry later."
    ),
    ErrorCode.TOO_MANY_CONNECTIONS: (
        "The broker holds WHARF_MAX_CONNECTIONS connections already; this one is answered and closed. Retry."
    ),
    ErrorCode.DISK_FULL: (
        "The store's disk is over its refuse-writes ratio or has no room for a new segment: nothing of "
        "the request was stored; writes are accepted again once space returns, reads keep working."
    ),
}


class ApiError(Exception):
    """An answer in the error envelope."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        headers: dict[str, str] | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.headers = headers
        self.extra = extra


# Most specific first: the first matching class wins.
STORE_ERRORS: list[tuple[type[Exception], ErrorCode]] = [
    (store_errors.EmptyBodyError, ErrorCode.EMPTY_BODY),
    (store_errors.MessageTooLargeError, ErrorCode.MESSAGE_TOO_LARGE),
    (store_errors.InvalidTopicError, ErrorCode.INVALID_TOPIC),
    (store_errors.PropertiesTooLargeError, ErrorCode.PROPERTIES_TOO_LARGE),
    (store_errors.InvalidQueueError, ErrorCode.INVALID_QUEUE),
    (store_errors.MessageRejectedError, ErrorCode.INVALID_PROPERTY),
    (store_errors.DiskFullError, ErrorCode.DISK_FULL),
    (store_errors.ResourceExhaustedError, ErrorCode.RESOURCES_EXHAUSTED),
    (store_errors.StoreClosedError, ErrorCode.STORE_CLOSED),
    (store_errors.ReplicaReadOnlyError, ErrorCode.MISDIRECTED),
    (store_errors.CorruptRecordError, ErrorCode.INTERNAL_ERROR),
    (store_errors.StoreConfigError, ErrorCode.INTERNAL_ERROR),
    (store_errors.StoreLockedError, ErrorCode.INTERNAL_ERROR),
    (store_errors.StoreError, ErrorCode.INTERNAL_ERROR),
    (FilterExpressionError, ErrorCode.INVALID_TAG_EXPRESSION),
    (RegistryUnavailableError, ErrorCode.REGISTRY_UNAVAILABLE),
]


# Every class of app.broker.errors, exactly: its fields (``brokers`` of a 421, the queue's range of a
# 40014) go into the answer beside the message.
BROKER_ERRORS: dict[type[broker_errors.BrokerError], ErrorCode] = {
    broker_errors.BrokerError: ErrorCode.BAD_REQUEST,
    broker_errors.BadRequestError: ErrorCode.BAD_REQUEST,
    broker_errors.InvalidParameterError: ErrorCode.INVALID_PARAMETER,
    broker_errors.InvalidOffsetError: ErrorCode.INVALID_OFFSET,
    broker_errors.InvalidPropertyError: ErrorCode.INVALID_PROPERTY,
    broker_errors.WriteQueueError: ErrorCode.INVALID_QUEUE,
    broker_errors.OffsetOutOfRangeError: ErrorCode.OFFSET_OUT_OF_RANGE,
    broker_errors.TopicNotFoundError: ErrorCode.TOPIC_NOT_FOUND,
    broker_errors.QueueNotFoundError: ErrorCode.QUEUE_NOT_FOUND,
    broker_errors.TopicNotWritableError: ErrorCode.TOPIC_NOT_WRITABLE,
    broker_errors.MisdirectedError: ErrorCode.MISDIRECTED,
    broker_errors.TopicExistsError: ErrorCode.TOPIC_EXISTS,
    broker_errors.TooManyTopicsError: ErrorCode.TOO_MANY_ITEMS,
    broker_errors.NoRegistryError: ErrorCode.BAD_REQUEST,
    broker_errors.ClusterNotFoundError: ErrorCode.CLUSTER_NOT_FOUND,
    broker_errors.MemberNotFoundError: ErrorCode.MEMBER_NOT_FOUND,
    broker_errors.GroupConflictError: ErrorCode.GROUP_CONFLICT,
    broker_errors.GroupFullError: ErrorCode.GROUP_FULL,
    broker_errors.GenerationFencedError: ErrorCode.GENERATION_FENCED,
    broker_errors.MessageNotFoundError: ErrorCode.MESSAGE_NOT_FOUND,
    broker_errors.ReceiptHandleNotFoundError: ErrorCode.RECEIPT_HANDLE_NOT_FOUND,
    broker_errors.ReceiptHandleExpiredError: ErrorCode.RECEIPT_HANDLE_EXPIRED,
    broker_errors.InvalidFilterExpressionError: ErrorCode.INVALID_FILTER_EXPRESSION,
    broker_errors.QueueNotLockedError: ErrorCode.QUEUE_NOT_LOCKED,
    broker_errors.TransactionNotFoundError: ErrorCode.TRANSACTION_NOT_FOUND,
    broker_errors.TransactionEndedError: ErrorCode.TRANSACTION_ENDED,
    broker_errors.TooManyOpenTransactionsError: ErrorCode.TOO_MANY_OPEN_TRANSACTIONS,
    broker_errors.PromotionError: ErrorCode.PROMOTION_REFUSED,
    broker_errors.MasterAliveError: ErrorCode.MASTER_ALIVE,
    broker_errors.TooManyPushSubscriptionsError: ErrorCode.TOO_MANY_PUSH_SUBSCRIPTIONS,
}


def from_broker(error: broker_errors.BrokerError) -> ApiError:
    """The answer to a refusal of the broker core."""
    headers = None
    if isinstance(error, broker_errors.MisdirectedError) and error.brokers:
        headers = {"Location": error.brokers[0]}
    return ApiError(BROKER_ERRORS[type(error)], error.message, headers, error.fields or None)


def code_for(error: Exception) -> ErrorCode:
    for cls, code in STORE_ERRORS:
        if isinstance(error, cls):
            return code
    return ErrorCode.INTERNAL_ERROR


def error_response(
    code: ErrorCode,
    message: str,
    headers: dict[str, str] | None = None,
    extra: dict[str, object] | None = None,
) -> Response:
    return Response(
        orjson.dumps({"error_code": int(code), "message": message, **(extra or {})}),
        status_code=code.http_status,
        media_type="application/json",
        headers=headers,
    )


def _describe_validation(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(item) for item in error.get("loc", ()) if item != "body")
        parts.append(f"{where or 'request'}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "the request is not valid"


def install_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc.code, exc.message, exc.headers, exc.extra)

    async def broker_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, broker_errors.BrokerError)
        return await api_error(request, from_broker(exc))

    async def store_error(request: Request, exc: Exception) -> Response:
        code = code_for(exc)
        if code is ErrorCode.INTERNAL_ERROR:
            log.error("store fault answering %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(code, str(exc))

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(ErrorCode.VALIDATION_FAILED, _describe_validation(exc))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = {
            404: ErrorCode.NOT_FOUND,
            405: ErrorCode.METHOD_NOT_ALLOWED,
            413: ErrorCode.REQUEST_TOO_LARGE,
            415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        }.get(exc.status_code, ErrorCode.BAD_REQUEST)
        message = exc.detail if isinstance(exc.detail, str) else code.name.lower().replace("_", " ")
        return error_response(code, message, getattr(exc, "headers", None))

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("unexpected fault answering %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(ErrorCode.INTERNAL_ERROR, "internal error")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(broker_errors.BrokerError, broker_error)
    app.add_exception_handler(store_errors.StoreError, store_error)
    app.add_exception_handler(FilterExpressionError, store_error)
    app.add_exception_handler(RegistryUnavailableError, store_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
