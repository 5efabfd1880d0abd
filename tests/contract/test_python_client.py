"""A Python client generated from openapi.yaml works against a real broker, with no hand edits.

openapi-python-client (pinned in the test extra) writes the client into a temporary directory; the
test imports it and goes through a consumer's day: create a topic, produce a batch, pull it back,
commit an offset, read the lag, look a message up by id, and read an error in the envelope.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.api.server import BrokerProcess

# Generating the client takes a few seconds.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "wharf_generated_client"

# The generator has no way to send these two media types of produce (it sends JSON, form data and
# single files): it says so and generates produce with the others. Any other warning fails the test.
EXPECTED_WARNINGS = {
    "Unsupported content type application/x-ndjson",
    "Unsupported content type application/vnd.wharf.batch",
}


def generator_warnings(output: str) -> list[str]:
    """The detail line under each of the generator's WARNING lines."""
    lines = [line.strip() for line in output.splitlines()]
    found = []
    for number, line in enumerate(lines):
        if line.startswith("WARNING"):
            detail = next((later for later in lines[number + 1 :] if later), "")
            found.append(f"{line}: {detail}")
    return found


@pytest.fixture(scope="module")
def client_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    target = tmp_path_factory.mktemp("python-client")
    bin_dir = str(Path(sys.executable).parent)  # the generator formats its output with ruff
    run = subprocess.run(
        [
            *(sys.executable, "-m", "openapi_python_client", "generate"),
            *("--path", str(ROOT / "openapi.yaml")),
            *("--output-path", str(target / PACKAGE)),
            *("--meta", "none"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")},
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    unexpected = [
        warning
        for warning in generator_warnings(output)
        if not any(warning.endswith(expected) for expected in EXPECTED_WARNINGS)
    ]
    assert not unexpected, output
    sys.path.insert(0, str(target))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(target))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def operation(module: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.api.{module}")


def models() -> Any:
    return importlib.import_module(f"{PACKAGE}.models")


@pytest.fixture
def api(client_package: ModuleType, broker: BrokerProcess) -> Iterator[Any]:
    # Any status the document does not declare raises instead of answering None.
    with client_package.Client(base_url=broker.url, raise_on_unexpected_status=True, timeout=30.0) as client:
        yield client


def test_every_operation_is_generated(client_package: ModuleType) -> None:
    document = yaml.safe_load((ROOT / "openapi.yaml").read_text())
    package_dir = Path(client_package.__file__).parent
    generated = {path.stem for path in (package_dir / "api").glob("*/*.py") if path.stem != "__init__"}
    wanted = {
        "".join("_" + char.lower() if char.isupper() else char for char in operation["operationId"])
        for methods in document["paths"].values()
        for operation in methods.values()
    }
    assert wanted <= generated, wanted - generated


def test_a_consumer_day_through_the_generated_client(api: Any) -> None:
    m = models()
    topic = "generated-client-orders"

    created = operation("topics.create_topic").sync_detailed(
        client=api, body=m.TopicCreate(name=topic, queues=2)
    )
    assert created.status_code == 201
    assert isinstance(created.parsed, m.TopicOut)
    assert (created.parsed.name, created.parsed.read_queues) == (topic, 2)

    batch = m.ProduceRequest(
        messages=[
            m.MessageIn(body=f"order {number}", tags="TagA", keys=[f"order-{number}"], queue_id=0)
            for number in range(3)
        ]
    )
    produced = operation("messages.produce").sync(topic, client=api, body=batch)
    assert isinstance(produced, m.ProduceResponse)
    assert [result.queue_offset for result in produced.results] == [0, 1, 2]
    assert {result.status for result in produced.results} == {m.ProduceResultStatus.SEND_OK}

    pulled = operation("messages.pull_messages").sync(topic, 0, client=api, offset=0, max_messages=10)
    assert isinstance(pulled, m.PullResponse)
    assert pulled.status == m.PullResponseStatus.FOUND
    assert [message.body for message in pulled.messages] == ["order 0", "order 1", "order 2"]
    assert pulled.next_offset == 3

    committed = operation("groups.commit_offsets").sync(
        "generated-billing",
        client=api,
        body=m.OffsetCommitRequest(offsets=[m.OffsetCommit(topic=topic, queue_id=0, offset=2)]),
    )
    assert isinstance(committed, m.GroupOffsets)

    offsets = operation("groups.get_offsets").sync("generated-billing", client=api, topic=topic)
    assert isinstance(offsets, m.GroupOffsets)
    lag = {row.queue_id: (row.committed_offset, row.lag) for row in offsets.offsets}
    assert lag == {0: (2, 1), 1: (None, 0)}

    first = produced.results[0]
    message = operation("messages.get_message").sync(first.msg_id, client=api)
    assert isinstance(message, m.MessageOut)
    assert (message.body, message.keys, message.queue_offset) == ("order 0", ["order-0"], 0)


def test_a_raw_body_and_an_error_through_the_generated_client(client_package: ModuleType, api: Any) -> None:
    m = models()
    types = importlib.import_module(f"{PACKAGE}.types")
    topic = "generated-client-raw"
    raw = types.File(payload=b"\x00\xffraw bytes", mime_type="application/octet-stream")
    produced = operation("messages.produce").sync(topic, client=api, body=raw, tags="TagB", queue_id=1)
    assert isinstance(produced, m.ProduceResponse)
    (result,) = produced.results
    assert result.queue_id == 1

    message = operation("messages.get_message").sync(result.msg_id, client=api)
    assert (message.body, message.encoding, message.tags) == (
        "AP9yYXcgYnl0ZXM=",
        m.MessageOutEncoding.BASE64,
        "TagB",
    )

    missing = operation("topics.get_topic").sync_detailed("generated-client-no-such-topic", client=api)
    assert missing.status_code == 404
    assert isinstance(missing.parsed, m.ErrorEnvelope)
    assert missing.parsed.error_code == 40402

    ready = operation("health.get_readiness").sync(client=api)
    assert isinstance(ready, m.ReadyStatus)
