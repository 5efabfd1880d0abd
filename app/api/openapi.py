"""The OpenAPI document: FastAPI's, made into the contract clients are generated from.

FastAPI describes the routes; this module adds what it cannot know, in one place:

- a short, stable ``operationId`` per operation (:data:`OPERATION_IDS`, by endpoint function name),
  instead of FastAPI's ``produce_v1_topics__topic__messages_post``;
- every error status an operation can answer (:data:`OPERATION_ERRORS` plus :data:`COMMON_ERRORS`),
  each with the one envelope Wharf really sends - also 422, which FastAPI would describe with its
  own ``HTTPValidationError`` that Wharf never answers;
- the message schemas that produce parses by hand (``MessageIn``, ``ProduceRequest``);
- the table of error codes (``ErrorCode``).

``python -m app openapi > openapi.yaml`` (``wharf openapi``) writes the checked-in copy; a test fails when it drifts.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from app.api.errors import ERROR_DESCRIPTIONS, ErrorCode
from app.api.schemas import ErrorEnvelope, MessageIn, ProduceRequest

SCHEMAS = "#/components/schemas/"
ENVELOPE_REF = {"$ref": f"{SCHEMAS}ErrorEnvelope"}

# Endpoint function name -> operationId: lowerCamelCase, a verb first (``produce`` is one).
OPERATION_IDS: dict[str, str] = {
    "produce": "produce",
    "pull": "pullMessages",
    "follow_events": "followEvents",
    "query_by_key": "queryMessagesByKey",
    "get_message": "getMessage",
    "create_topic": "createTopic",
    "list_topics": "listTopics",
    "get_topic": "getTopic",
    "delete_topic": "deleteTopic",
    "update_topic": "updateTopic",
    "skip_dead_letters": "skipDeadLetters",
    "registry_health": "getRegistryHealth",
    "store_files": "getStoreFiles",
    "pop_in_flight": "getPopInFlight",
    "list_queues": "listQueues",
    "search_offset": "searchOffset",
    "topic_route": "getTopicRoute",
    "clusters": "listClusters",
    "list_groups": "listGroups",
    "commit_offsets": "commitOffsets",
    "get_offsets": "getOffsets",
    "heartbeat": "heartbeatMember",
    "leave": "leaveGroup",
    "group_pull": "pullAsMember",
    "lock_queues": "lockQueues",
    "unlock_queues": "unlockQueues",
    "describe_group": "getGroup",
    "set_group_config": "setGroupConfig",
    "retry": "retryMessage",
    "list_dead_letters": "listDeadLetters",
    "resend_dead_letters": "resendDeadLetters",
    "pop": "popMessages",
    "ack": "ackMessages",
    "nack": "nackMessages",
    "change_invisibility": "changeInvisibility",
    "commit_transaction": "commitTransaction",
    "rollback_transaction": "rollbackTransaction",
    "list_pending_transactions": "listPendingTransactions",
    "register_producer": "registerProducer",
    "get_producer": "getProducer",
    "clean": "cleanStore",
    "disk_usage": "getDiskUsage",
    "ha_status": "getReplication",
    "search_topics": "searchTopics",
    "search_groups": "searchGroups",
    "delay_levels": "getDelayLevels",
    "open_transactions": "listOpenTransactions",
    "get_access": "getAccess",
    "ha_metadata": "getReplicationMetadata",
    "ha_promote": "promoteSlave",
    "ha_offsets": "takeSlaveOffsets",
    "healthz": "getHealth",
    "readyz": "getReadiness",
    "stats": "getStats",
    "put_push": "putPushSubscription",
    "get_push_subscription": "getPushSubscription",
    "delete_push": "deletePushSubscription",
    "list_push": "listPushSubscriptions",
}

# Operations open to everyone, whatever the access control says: probes must always answer.
UNAUTHENTICATED = frozenset({"getHealth", "getReadiness"})

# Why a status can come, where every operation shares the reason.
STATUS_REASONS: dict[int, str] = {
    400: "The request is malformed",
    401: "Not authenticated: access control is on and the request has no valid credentials",
    403: "Forbidden: the credentials do not allow this operation",
    404: "Not found",
    409: "Conflict",
    413: "Too large: the request body is over `WHARF_MAX_REQUEST_BYTES`",
    414: "The URL is over `WHARF_MAX_URL_BYTES` (41401)",
    415: "The Content-Type is not one this operation accepts",
    421: "This broker does not host the topic: `brokers` (and `Location`) name those that do",
    422: "A parameter or a field of the body has the wrong type, is missing or out of bounds",
    500: "An unexpected fault; it is logged",
    503: "The broker is starting or stopping, the route registry cannot be reached, the broker is "
    "out of open files or memory mappings, or it has as many connections as it takes; retry later",
    507: "The store's disk is full: nothing of the request was stored",
}

# Every operation can answer these (401 and 403 only where access control applies).
COMMON_ERRORS: dict[int, str | None] = {401: None, 403: None, 414: None, 500: None, 503: None}

# Operations with a request body can also answer these.
BODY_ERRORS: dict[int, str | None] = {
    400: "The body is not valid JSON",
    413: None,
    415: None,
    422: None,
}

_TOPIC = {404: "The topic (40402) does not exist", 421: None}
_QUEUE = {404: "The topic (40402) or the queue (40403) does not exist", 421: None}

# operationId -> the errors of that operation besides the common ones (None: the status's reason).
OPERATION_ERRORS: dict[str, dict[int, str | None]] = {
    "produce": {
        400: "The body does not parse in its format (40002, 40010), a body does not decode (40003), "
        "is empty (40006), a property is bad (40008), the queue is not one of the topic's (40011), "
        "the topic name is not valid (40005), a bad delay, `transaction` or `producer_group` (40012), "
        "or a CloudEvent lacks a required attribute or is malformed (40016, naming it)",
        404: "The topic does not exist and topics are not created on first produce (40402)",
        409: "The topic's permission forbids producing (40902)",
        413: "A message (41301), its properties (41302) or the request (41303) is too large",
        421: None,
        429: "A transaction begin would pass WHARF_MAX_OPEN_TRANSACTIONS (42901): nothing was stored",
        507: None,
    },
    "pullMessages": {
        400: "A bad offset (40007, 40014), tag filter (40004), SQL92 filter (40015, with its `line` and "
        "`column`), `from`, `max_messages` or filter parameters (40012), or an offset to commit without a "
        "group (40001)",
        **_QUEUE,
        409: "The topic's permission forbids pulling (40903)",
    },
    "followEvents": {
        400: "A bad tag filter (40004), SQL92 filter (40015, with its `line` and `column`), `from` "
        "(40012) or Last-Event-ID (40013), or commit without a group (40001)",
        **_QUEUE,
        409: "The topic's permission forbids reading (40903)",
    },
    "queryMessagesByKey": {400: "`end` is before `begin` (40012)", **_TOPIC},
    "getMessage": {
        400: "The id is not 32 hexadecimal digits (40009)",
        404: "No message has that id here (40404); for an id of another broker `owner` is its host:port",
    },
    "createTopic": {
        404: "No live master in the named cluster or brokers (40406)",
        409: "The topic exists with another configuration (40901)",
        413: "A bulk create lists more than 1,000 topics (41304), or the request is too large (41303)",
        421: "This broker is a slave: topics are created on its master (42101)",
    },
    "listTopics": {400: "A bad `limit` (40012) or `cursor` (40013)"},
    "getTopic": {**_TOPIC},
    "deleteTopic": {**_TOPIC},
    "updateTopic": {
        400: "Read queues fewer than write queues, or queues given with read_queues or write_queues "
        "(40012); a group's %RETRY% or %DLQ% topic or an internal topic (40005)",
        **_TOPIC,
        503: "The route registry, which takes the change, cannot be reached (50303)",
    },
    "listQueues": {**_TOPIC},
    "searchOffset": {**_QUEUE},
    "getTopicRoute": {404: "No broker serves the topic (40402)"},
    "listClusters": {},
    "listGroups": {400: "A bad `limit` (40012) or `cursor` (40013)"},
    "commitOffsets": {
        400: "An offset is outside its queue's min..max offsets (40014): nothing was committed; the "
        "answer names the topic, queue_id, min_offset and max_offset; or a member's commit has no "
        "generation (40001)",
        404: "The topic (40402) or the queue (40403) does not exist, or `client_id` is not a member (40407)",
        409: "A member's commit names an older generation or a queue it does not own (40904): nothing "
        "was committed; the answer carries the current `generation`; an ordered member's commit names a "
        "queue whose lock it does not hold (40930)",
        421: None,
    },
    "heartbeatMember": {
        400: "A bad tag expression (40004), SQL92 expression (40015, with its `line` and `column`) or "
        "`consume_from` (40012), or consume_mode orderly with model broadcasting (40001)",
        404: "A subscribed topic does not exist (40402)",
        409: "The group's other members use another model, strategy or consume mode (40905), or it is "
        "full (40906)",
        421: None,
    },
    "leaveGroup": {404: "The client is not a member of the group (40407)"},
    "pullAsMember": {
        400: "A bad `max_messages` (40012)",
        404: "The client is not a member of the group: heartbeat first (40407)",
    },
    "lockQueues": {
        400: "The member consumes concurrently: heartbeat with consume_mode orderly first (40001)",
        404: "The client is not a member of the group: heartbeat first (40407)",
    },
    "unlockQueues": {},
    "getGroup": {404: "The group has no members, committed offsets or settings (40405)"},
    "setGroupConfig": {},
    "putPushSubscription": {
        400: "The url is not http:// or https://, does not resolve, or resolves to a loopback, link-local or "
        "private address without WHARF_PUSH_ALLOW_PRIVATE (40012); a bad field, secret or tag (40004) "
        "or SQL92 filter (40015)",
        **_TOPIC,
        409: "The group has members pulling (40905), or the broker runs as many push subscriptions as it "
        "takes (40950)",
    },
    "getPushSubscription": {404: "The group has no push subscription (40405)"},
    "deletePushSubscription": {404: "The group has no push subscription (40405)"},
    "listPushSubscriptions": {},
    "listDeadLetters": {},
    "resendDeadLetters": {
        400: 'Neither "msg_ids" nor "all": true, or both (40001)',
        404: "A msg_id names no dead letter of the group (40404), or its topic is gone (40402)",
        409: "The original topic does not accept messages (40902)",
        421: None,
    },
    "getRegistryHealth": {},
    "getStoreFiles": {},
    "getPopInFlight": {404: "No such path: a group name with a `/` in it (40401)"},
    "skipDeadLetters": {
        400: 'Neither "through_offset" nor "all": true, or both (40001)',
        404: "No such path: a group name with a `/` in it (40401)",
    },
    "retryMessage": {
        400: "Neither msg_id nor topic, queue_id and offset, or both (40001)",
        404: "No such message here (40404), topic (40402) or queue (40403)",
        409: "The retry or dead-letter topic does not accept messages (40902)",
        421: None,
    },
    "popMessages": {
        400: "A bad `max_messages`, `consume_from` or filter parameters (40012), tag filter (40004) or "
        "SQL92 filter (40015, with its `line` and `column`)",
        **_TOPIC,
        409: "The topic's permission forbids reading (40903)",
    },
    "ackMessages": {**_TOPIC},
    "nackMessages": {**_TOPIC},
    "changeInvisibility": {
        404: "The topic does not exist (40402), or the receipt handle names no message the group "
        "popped from it (40410)",
        409: "The receipt handle is not the message's latest (40910): it was acked, handed out again, "
        "nacked or given another invisible time",
        421: None,
    },
    "commitTransaction": {
        404: "No transaction has that id here (40408), or its topic no longer exists (40402)",
        409: "The transaction was committed or rolled back already (40920), or its topic does not accept "
        "messages (40902): nothing was changed",
        421: None,
        507: None,
    },
    "rollbackTransaction": {
        404: "No transaction has that id here (40408)",
        409: "The transaction was committed or rolled back already (40920): nothing was changed",
        507: None,
    },
    "listPendingTransactions": {400: "A bad `producer_group` or `limit` (40012)"},
    "registerProducer": {400: "`check_url` is not an http(s) URL (40012)"},
    "getProducer": {},
    "getOffsets": {
        404: "The group has no committed offsets (40405), or the topic does not exist (40402)",
        421: None,
    },
    "cleanStore": {},
    "getDiskUsage": {},
    "getReplication": {},
    "getReplicationMetadata": {421: "This broker is a slave: ask its master (42101)"},
    "takeSlaveOffsets": {421: "This broker is a slave: hand them to its master (42101)"},
    "promoteSlave": {
        409: "This broker is the master already, or another broker of its name was promoted first "
        "(40940); its master is alive and `force` is not true (40941, with `master_url` and "
        "`lease_ends_in_ms`)",
        503: "The route registry, which records the epoch, cannot be reached (50303)",
    },
    "getHealth": {},
    "getReadiness": {
        503: "The store is opening or closing (50301), or the route registry cannot be reached (50303)"
    },
    "getStats": {},
}

# Models that produce parses by hand, so FastAPI never sees them; its requestBody refers to them.
EXTRA_MODELS: tuple[type[BaseModel], ...] = (MessageIn, ProduceRequest, ErrorEnvelope)


def operation_id(endpoint_name: str) -> str:
    """The operationId of an endpoint; lowerCamelCase of its name when the table has none (a test
    fails then: every operation is listed)."""
    known = OPERATION_IDS.get(endpoint_name)
    if known is not None:
        return known
    head, *rest = endpoint_name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _endpoint_name(default_id: str, path: str, method: str) -> str:
    """The endpoint function's name, from the operationId FastAPI made of it, the path and the
    method (fastapi.routing.generate_unique_id)."""
    suffix = re.sub(r"\W", "_", path) + "_" + method
    return default_id[: -len(suffix)] if default_id.endswith(suffix) else default_id


def _codes_of(status: int) -> str:
    codes = [code for code in ErrorCode if code.http_status == status]
    return ", ".join(f"{int(code)} {code.name}" for code in codes)


def _error_response(status: int, reason: str | None) -> dict[str, Any]:
    """An error answer: the operation's own reason (it names its codes), else the status's shared
    reason and every code of that status."""
    description = reason
    if description is None:
        description = STATUS_REASONS.get(status, "Error")
        codes = _codes_of(status)
        if codes:
            description += f". Codes: {codes}"
    return {"description": description, "content": {"application/json": {"schema": dict(ENVELOPE_REF)}}}


def _add_models(schemas: dict[str, Any]) -> None:
    for model in EXTRA_MODELS:
        schema = model.model_json_schema(ref_template=SCHEMAS + "{model}", mode="validation")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema


def _document_errors(operation: dict[str, Any], op_id: str) -> None:
    errors: dict[int, str | None] = {}
    for status, reason in COMMON_ERRORS.items():
        if status in (401, 403) and op_id in UNAUTHENTICATED:
            continue
        errors[status] = reason
    if "requestBody" in operation:
        errors.update(BODY_ERRORS)
    errors.update(OPERATION_ERRORS.get(op_id, {}))
    responses: dict[str, Any] = operation.setdefault("responses", {})
    # FastAPI's 422 (HTTPValidationError) is not what Wharf answers; declared errors are redone here.
    for declared in [key for key in responses if key[0] in "45"]:
        errors.setdefault(int(declared), None)
        del responses[declared]
    for status in sorted(errors):
        responses[str(status)] = _error_response(status, errors[status])


def build_openapi(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    _add_models(components)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            op_id = operation_id(_endpoint_name(operation["operationId"], path, method))
            operation["operationId"] = op_id
            _document_errors(operation, op_id)
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    table = "\n".join(f"- `{int(code)}` {code.name}: {ERROR_DESCRIPTIONS[code]}" for code in ErrorCode)
    components["ErrorCode"] = {
        "type": "integer",
        "enum": [int(code) for code in ErrorCode],
        "description": "Every error_code Wharf answers; the HTTP status is error_code // 100.\n\n" + table,
    }
    schema["components"]["schemas"] = dict(sorted(components.items()))
    return schema


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def render(app: FastAPI) -> str:
    return yaml.safe_dump(app.openapi(), sort_keys=False, allow_unicode=True, width=120)
