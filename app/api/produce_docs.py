"""The OpenAPI description of produce: its request bodies, one per media type, and the query
parameters and ``ce-*`` headers the produce code reads by hand (:mod:`app.api.messages`)."""

from __future__ import annotations

from typing import Any

from app.cloudevents import BATCH_MEDIA_TYPE as CLOUDEVENTS_BATCH
from app.cloudevents import STRUCTURED_MEDIA_TYPE as CLOUDEVENT
from app.codec import BATCH_MEDIA_TYPE

JSON = "application/json"
NDJSON = "application/x-ndjson"
OCTET_STREAM = "application/octet-stream"

PRODUCE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            JSON: {
                "schema": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/ProduceRequest"},
                        {"$ref": "#/components/schemas/MessageIn"},
                    ]
                },
                "examples": {
                    "batch": {
                        "value": {"messages": [{"body": "hello", "tags": "TagA", "keys": ["order-1"]}]}
                    },
                    "single": {"value": {"body": "hello", "tags": "TagA"}},
                },
            },
            NDJSON: {
                "schema": {"type": "string", "description": "One MessageIn JSON object per line."},
                "example": '{"body": "one"}\n{"body": "two", "tags": "TagB"}\n',
            },
            OCTET_STREAM: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "The raw body of one message.",
                }
            },
            CLOUDEVENT: {
                "schema": {
                    "type": "object",
                    "description": "One CloudEvent 1.0 in structured mode: specversion, id, source and type "
                    "required; data (JSON, or a string for a non-JSON datacontenttype) or data_base64. "
                    "id + source make the unique id, type the tags, subject the key, every attribute a "
                    "property ce_<name> (docs/guides/browser.md, CloudEvents).",
                    "required": ["specversion", "id", "source", "type"],
                    "properties": {
                        "specversion": {"type": "string", "enum": ["1.0"]},
                        "id": {"type": "string", "minLength": 1},
                        "source": {"type": "string", "minLength": 1},
                        "type": {"type": "string", "minLength": 1},
                        "subject": {"type": "string"},
                        "time": {"type": "string"},
                        "datacontenttype": {"type": "string"},
                        "dataschema": {"type": "string"},
                        "data": {},
                        "data_base64": {"type": "string"},
                    },
                },
                "example": {
                    "specversion": "1.0",
                    "id": "A234-1234-1234",
                    "source": "/orders",
                    "type": "com.example.order.created",
                    "data": {"order": 1},
                },
            },
            CLOUDEVENTS_BATCH: {
                "schema": {
                    "type": "string",
                    "description": "CloudEvents in batched mode: a JSON array of structured events "
                    "(as application/cloudevents+json has them), one message each.",
                },
                "example": '[{"specversion": "1.0", "id": "1", "source": "/orders", "type": "created"}]',
            },
            BATCH_MEDIA_TYPE: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "Wharf's binary batch (docs/guides/produce.md): 'WHB1', count, then per message "
                    "queue_id, flag, born_timestamp, tags, keys, unique_id, sharding_key, properties, body. "
                    "A delay is a property: DELAY (level), TIMER_DELAY_MS or TIMER_DELIVER_MS.",
                }
            },
        },
    }
}


def _raw_parameter(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


# The raw-body fields are read from the query string by hand: declaring them as FastAPI query
# parameters costs more than the rest of a single-message produce.
PRODUCE_PARAMETERS = {
    "parameters": [
        _raw_parameter(
            "tags",
            "Raw body or CloudEvents: the message's tag (a CloudEvent's default: its type)",
            {"type": "string", "minLength": 1, "maxLength": 1024},
        ),
        _raw_parameter(
            "keys",
            "Raw body only: space-separated keys",
            {"type": "string", "minLength": 1, "maxLength": 4096},
        ),
        _raw_parameter("queue_id", "Raw body only: explicit queue", {"type": "integer", "minimum": 0}),
        _raw_parameter(
            "sharding_key", "Raw body only", {"type": "string", "minLength": 1, "maxLength": 1024}
        ),
        _raw_parameter("unique_id", "Raw body only", {"type": "string", "minLength": 1, "maxLength": 128}),
        _raw_parameter(
            "property",
            "Raw body only: name:value, repeatable",
            {"type": "array", "items": {"type": "string"}},
        ),
        _raw_parameter(
            "delay_level",
            "Raw body only: deliver after level 1-18's delay (1s ... 2h)",
            {"type": "integer", "minimum": 1, "maximum": 18},
        ),
        _raw_parameter(
            "delay_ms", "Raw body only: deliver this many ms from now", {"type": "integer", "minimum": 0}
        ),
        _raw_parameter(
            "deliver_at_ms", "Raw body only: deliver at this epoch ms", {"type": "integer", "minimum": 0}
        ),
        _raw_parameter(
            "transaction",
            "Any format: 'begin' stores each message as a half message of its own transaction",
            {"type": "string", "enum": ["begin"]},
        ),
        *(
            {
                "name": f"ce-{name}",
                "in": "header",
                "required": False,
                "description": f"CloudEvents binary mode: the event's {name} (ce-specversion makes the "
                "request one event, its body the data and its Content-Type the datacontenttype)",
                "schema": {"type": "string", "minLength": 1},
            }
            for name in ("specversion", "id", "source", "type", "subject", "time")
        ),
        _raw_parameter(
            "producer_group",
            "With transaction=begin: the producer group asked about the transactions left open",
            {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[a-zA-Z0-9_-]+$"},
        ),
    ]
}
