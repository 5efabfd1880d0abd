"""openapi.yaml at the repository root is exactly what the app serves, and a valid contract: one
stable operationId per operation, every request body described, every error status documented with
the envelope the broker really sends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from openapi_spec_validator import validate

from app.api.app import create_app
from app.api.errors import ErrorCode
from tests.api.server import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]

# (method, path) -> operationId: clients are generated with these names, so they do not change.
OPERATION_IDS = {
    ("post", "/v1/topics/{topic}/messages"): "produce",
    ("get", "/v1/topics/{topic}/messages"): "queryMessagesByKey",
    ("get", "/v1/topics/{topic}/queues/{queue_id}/messages"): "pullMessages",
    ("get", "/v1/topics/{topic}/events"): "followEvents",
    ("post", "/v1/topics"): "createTopic",
    ("get", "/v1/topics"): "listTopics",
    ("get", "/v1/topics/{topic}"): "getTopic",
    ("delete", "/v1/topics/{topic}"): "deleteTopic",
    ("put", "/v1/topics/{topic}"): "updateTopic",
    ("get", "/v1/topics/{topic}/queues"): "listQueues",
    ("get", "/v1/topics/{topic}/queues/{queue_id}/offset"): "searchOffset",
    ("get", "/v1/messages/{msg_id}"): "getMessage",
    ("get", "/v1/topics/{topic}/route"): "getTopicRoute",
    ("get", "/v1/clusters"): "listClusters",
    ("get", "/v1/groups"): "listGroups",
    ("put", "/v1/groups/{group}/offsets"): "commitOffsets",
    ("post", "/v1/groups/{group}/heartbeat"): "heartbeatMember",
    ("delete", "/v1/groups/{group}/members/{client_id}"): "leaveGroup",
    ("post", "/v1/groups/{group}/locks"): "lockQueues",
    ("delete", "/v1/groups/{group}/locks"): "unlockQueues",
    ("get", "/v1/groups/{group}/messages"): "pullAsMember",
    ("get", "/v1/groups/{group}"): "getGroup",
    ("put", "/v1/groups/{group}/config"): "setGroupConfig",
    ("post", "/v1/groups/{group}/retry"): "retryMessage",
    ("get", "/v1/groups/{group}/dlq"): "listDeadLetters",
    ("post", "/v1/groups/{group}/dlq/resend"): "resendDeadLetters",
    ("post", "/v1/groups/{group}/dlq/skip"): "skipDeadLetters",
    ("get", "/v1/admin/registry"): "getRegistryHealth",
    ("get", "/v1/admin/store"): "getStoreFiles",
    ("get", "/v1/admin/groups/{group}/pop"): "getPopInFlight",
    ("get", "/v1/groups/{group}/offsets"): "getOffsets",
    ("post", "/v1/groups/{group}/topics/{topic}/pop"): "popMessages",
    ("post", "/v1/groups/{group}/topics/{topic}/ack"): "ackMessages",
    ("post", "/v1/groups/{group}/topics/{topic}/nack"): "nackMessages",
    ("post", "/v1/groups/{group}/topics/{topic}/invisibility"): "changeInvisibility",
    ("post", "/v1/transactions/{transaction_id}/commit"): "commitTransaction",
    ("post", "/v1/transactions/{transaction_id}/rollback"): "rollbackTransaction",
    ("post", "/v1/transactions/commit"): "commitTransactions",
    ("post", "/v1/topics/{topic}/transactions"): "beginBatchTransaction",
    ("post", "/v1/transactions/rollback"): "rollbackTransactions",
    ("get", "/v1/transactions/pending"): "listPendingTransactions",
    ("put", "/v1/producers/{producer_group}"): "registerProducer",
    ("get", "/v1/producers/{producer_group}"): "getProducer",
    ("post", "/v1/admin/clean"): "cleanStore",
    ("get", "/v1/admin/disk"): "getDiskUsage",
    ("get", "/v1/admin/topics"): "searchTopics",
    ("get", "/v1/admin/groups"): "searchGroups",
    ("get", "/v1/admin/delays"): "getDelayLevels",
    ("get", "/v1/admin/transactions"): "listOpenTransactions",
    ("get", "/v1/access"): "getAccess",
    ("get", "/v1/admin/ha"): "getReplication",
    ("get", "/v1/ha/metadata"): "getReplicationMetadata",
    ("post", "/v1/admin/ha/promote"): "promoteSlave",
    ("post", "/v1/ha/offsets"): "takeSlaveOffsets",
    ("get", "/healthz"): "getHealth",
    ("get", "/readyz"): "getReadiness",
    ("get", "/v1/stats"): "getStats",
    ("put", "/v1/groups/{group}/push"): "putPushSubscription",
    ("get", "/v1/groups/{group}/push"): "getPushSubscription",
    ("delete", "/v1/groups/{group}/push"): "deletePushSubscription",
    ("get", "/v1/push"): "listPushSubscriptions",
}
PROBES = {"getHealth", "getReadiness"}
PRODUCE_MEDIA_TYPES = {
    "application/json",
    "application/x-ndjson",
    "application/octet-stream",
    "application/vnd.wharf.batch",
    "application/cloudevents+json",
    "application/cloudevents-batch+json",
}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    return loaded


def operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        operation["operationId"]: operation
        for methods in document["paths"].values()
        for operation in methods.values()
    }


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in refs(value)]
    return []


def test_checked_in_openapi_matches_the_app() -> None:
    checked_in = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    assert checked_in == create_app().openapi(), (
        "openapi.yaml drifted: run python -m app openapi > openapi.yaml"
    )


def test_the_served_document_is_the_same(client: httpx.Client) -> None:
    served = client.get("/openapi.json").json()
    assert served == yaml.safe_load((ROOT / "openapi.yaml").read_text())


def test_every_error_code_is_documented() -> None:
    schema = create_app().openapi()["components"]["schemas"]["ErrorCode"]
    assert schema["enum"] == [int(code) for code in ErrorCode]
    for code in ErrorCode:
        assert str(int(code)) in schema["description"]


def test_contract_paths_are_present(broker: BrokerProcess) -> None:
    paths = create_app().openapi()["paths"]
    for path in (
        "/v1/topics",
        "/v1/topics/{topic}",
        "/v1/topics/{topic}/queues",
        "/v1/topics/{topic}/queues/{queue_id}/offset",
        "/v1/topics/{topic}/messages",
        "/v1/topics/{topic}/queues/{queue_id}/messages",
        "/healthz",
        "/readyz",
    ):
        assert path in paths, path


def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for ref in refs(document):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_every_operation_has_its_short_stable_id(document: dict[str, Any]) -> None:
    found = {
        (method, path): operation["operationId"]
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    }
    assert found == OPERATION_IDS


def test_no_parameter_is_declared_twice(document: dict[str, Any]) -> None:
    for op_id, operation in operations(document).items():
        declared = [(parameter["in"], parameter["name"]) for parameter in operation.get("parameters", [])]
        assert len(declared) == len(set(declared)), (op_id, declared)


def test_every_request_body_has_a_schema_per_media_type(document: dict[str, Any]) -> None:
    for op_id, operation in operations(document).items():
        body = operation.get("requestBody")
        if body is None:
            continue
        assert body["required"] is True, op_id
        for media_type, content in body["content"].items():
            assert content.get("schema"), (op_id, media_type)
    produce = operations(document)["produce"]["requestBody"]["content"]
    assert set(produce) == PRODUCE_MEDIA_TYPES
    single_or_batch = produce["application/json"]["schema"]["oneOf"]
    assert {"$ref": "#/components/schemas/ProduceRequest"} in single_or_batch
    assert {"$ref": "#/components/schemas/MessageIn"} in single_or_batch


def test_every_error_is_the_envelope(document: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for op_id, operation in operations(document).items():
        for status, response in operation["responses"].items():
            if status[0] in "45":
                assert response["content"] == {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}
                }, (op_id, status)


def test_every_status_the_broker_can_send_is_documented(document: dict[str, Any]) -> None:
    for op_id, operation in operations(document).items():
        statuses = set(operation["responses"])
        assert {"500", "503"} <= statuses, op_id
        if op_id not in PROBES:
            assert {"401", "403"} <= statuses, op_id
        if "requestBody" in operation:
            assert {"400", "413", "415", "422"} <= statuses, op_id
        if operation.get("parameters"):
            assert "422" in statuses, op_id
    by_id = operations(document)
    assert {"404", "409", "421", "507"} <= set(by_id["produce"]["responses"])
    assert {"404", "409", "421"} <= set(by_id["pullMessages"]["responses"])
    assert "507" not in by_id["pullMessages"]["responses"]


def test_the_probes_have_schemas(document: dict[str, Any]) -> None:
    by_id = operations(document)
    for op_id, schema in (("getHealth", "HealthStatus"), ("getReadiness", "ReadyStatus")):
        answer = by_id[op_id]["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer == {"$ref": f"#/components/schemas/{schema}"}
    assert "50301" in by_id["getReadiness"]["responses"]["503"]["description"]
    assert "401" not in by_id["getReadiness"]["responses"]
