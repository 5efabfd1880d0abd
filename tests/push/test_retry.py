"""A failed delivery - a status other than 2xx, a timeout - goes through the group's retry topic at
the delay levels (level 3 + the reconsume times, shortened here by WHARF_MESSAGE_DELAY_LEVEL) and to
its dead-letter topic after max_reconsume_times, as POST .../retry sends a pulled message back; a
Retry-After on a 429 or 503 holds the subscription's requests back."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess, free_port
from tests.push.receiver import (
    Received,
    Receiver,
    committed,
    produce,
    push_broker,
    state,
    subscribe,
    wait_until,
)

pytestmark = pytest.mark.slow

# Levels 3 and 4 (a first and a second retry) wait 1 s and 2 s, every other level 10 ms: a retry
# sent at another level comes back far sooner than the level it should have had.
SHORT_LEVELS = "10ms 10ms 1s 2s " + " ".join(["10ms"] * 14)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, httpx.Client]]:
    with push_broker(
        tmp_path_factory.mktemp("push-retry") / "store", message_delay_level=SHORT_LEVELS
    ) as running:
        yield running


def dead_letters(http: httpx.Client, group: str) -> list[dict[str, object]]:
    answer = http.get(f"/v1/groups/{group}/dlq")
    if answer.status_code == 404:
        return []
    assert answer.status_code == 200, answer.text
    found: list[dict[str, object]] = answer.json()["dead_letters"]
    return found


def test_500s_are_retried_at_the_delay_levels_then_dead_lettered(
    broker: tuple[BrokerProcess, httpx.Client],
) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "jobs", "queues": 1}).status_code == 201
    with Receiver(respond=lambda _: 500) as receiver:
        subscribe(http, "workers", topic="jobs", url=receiver.url, max_reconsume_times=2)
        (produced,) = produce(http, "jobs", {"body": "boom", "keys": ["job-1"]})
        got = receiver.wait_for(lambda received: len(received) >= 3)
        letters = wait_until(lambda: dead_letters(http, "workers"), what="the dead letter")
        assert [request.body for request in got] == [b"boom"] * 3
        assert [request.headers["wharf-reconsume-times"] for request in got] == ["0", "1", "2"]
        assert [request.headers.get("wharf-retry-topic") for request in got] == [
            None,
            "%RETRY%workers",
            "%RETRY%workers",
        ]
        assert all(request.headers["wharf-topic"] == "jobs" for request in got)
        assert all(request.headers["wharf-unique-id"] == produced["unique_id"] for request in got)
        # Level 3 for the first retry, 4 for the second (RocketMQ's 3 + reconsume times): no sooner.
        assert got[1].at - got[0].at >= 1.0
        assert got[2].at - got[1].at >= 2.0
        assert len(letters) == 1
        assert letters[0]["message"]["body"] == "boom"  # type: ignore[index]
        assert letters[0]["original_topic"] == "jobs"
        assert letters[0]["reconsume_times"] == 2
        shown = wait_until(
            lambda: (found := state(http, "workers"))["dead_lettered"] == 1 and found, what="counts"
        )
        assert shown["failed_by_kind"] == {"status": 3}
        assert shown["retried"] == 2
        assert shown["delivered"] == 0
        assert shown["last_error"]["message"] == "HTTP 500"
        # Consumed: the topic's offset and the retry topic's moved past the message.
        assert wait_until(lambda: committed(http, "workers", "jobs") == {0: 1}, what="the commit")
        assert wait_until(
            lambda: committed(http, "workers", "%RETRY%workers") == {0: 2}, what="the retry commits"
        )
        assert len(receiver.received) == 3
        metrics = http.get("/metrics").text
        assert 'wharf_push_failed_total{group="workers",kind="status"} 3.0' in metrics
        assert 'wharf_push_retried_total{group="workers"} 2.0' in metrics
        assert 'wharf_push_dead_lettered_total{group="workers"} 1.0' in metrics
        assert 'wharf_push_delivered_total{group="workers"} 0.0' in metrics
        assert 'wharf_push_in_flight{group="workers"} 0.0' in metrics


def test_a_timeout_is_a_failure_retried_the_same_way(broker: tuple[BrokerProcess, httpx.Client]) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "slow-jobs", "queues": 1}).status_code == 201
    with Receiver() as receiver:
        receiver.hang.set()
        subscribe(
            http, "sleepers", topic="slow-jobs", url=receiver.url, max_reconsume_times=1, timeout_ms=200
        )
        produce(http, "slow-jobs", {"body": "late"})
        got = receiver.wait_for(lambda received: len(received) >= 2)
        assert wait_until(lambda: dead_letters(http, "sleepers"), what="the dead letter")
        assert [request.headers["wharf-reconsume-times"] for request in got] == ["0", "1"]
        shown = wait_until(
            lambda: (found := state(http, "sleepers"))["dead_lettered"] == 1 and found, what="counts"
        )
        assert shown["failed_by_kind"] == {"timeout": 2}
        assert shown["last_error"]["message"].startswith("timeout")


def test_a_2xx_after_failures_is_the_end_of_it(broker: tuple[BrokerProcess, httpx.Client]) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "flaky", "queues": 1}).status_code == 201
    with Receiver(
        respond=lambda request: 200 if request.headers["wharf-reconsume-times"] == "1" else 502
    ) as receiver:
        subscribe(http, "patient", topic="flaky", url=receiver.url, max_reconsume_times=3)
        produce(http, "flaky", {"body": "second time lucky"})
        receiver.wait_for(lambda received: len(received) >= 2)
        shown = wait_until(
            lambda: (found := state(http, "patient"))["delivered"] == 1 and found, what="delivery"
        )
        assert shown["retried"] == 1
        assert shown["dead_lettered"] == 0
        assert shown["consecutive_failures"] == 0
        assert dead_letters(http, "patient") == []
        assert wait_until(
            lambda: committed(http, "patient", "%RETRY%patient") == {0: 1}, what="the retry commit"
        )
        assert len(receiver.received) == 2


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_holds_the_next_request_back(
    broker: tuple[BrokerProcess, httpx.Client], status: int
) -> None:
    _, http = broker
    topic, group = f"busy-{status}", f"polite-{status}"
    assert http.post("/v1/topics", json={"name": topic, "queues": 1}).status_code == 201

    def respond(request: Received) -> int | tuple[int, dict[str, str]]:
        return (status, {"retry-after": "2"}) if request.number == 0 else 200

    with Receiver(respond=respond) as receiver:
        subscribe(http, group, topic=topic, url=receiver.url, max_in_flight=1, paused=True)
        produce(http, topic, {"body": "a"}, {"body": "b"})
        subscribe(http, group, topic=topic, url=receiver.url, max_in_flight=1)
        got = receiver.wait_for(lambda received: len(received) >= 2)
        # Whatever came second came no sooner than the endpoint asked.
        assert got[1].at - got[0].at >= 2.0


def test_a_refused_connection_and_a_tls_failure_are_failures_of_their_kind(
    broker: tuple[BrokerProcess, httpx.Client], tmp_path: Path
) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "unreachable", "queues": 1}).status_code == 201
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    with Receiver(tls=(cert, key)) as untrusted:
        closed = f"http://127.0.0.1:{free_port()}/hook"
        subscribe(http, "nobody-home", topic="unreachable", url=closed, max_reconsume_times=0)
        subscribe(http, "self-signed", topic="unreachable", url=untrusted.url, max_reconsume_times=0)
        produce(http, "unreachable", {"body": "x"})
        refused = wait_until(
            lambda: (found := state(http, "nobody-home"))["dead_lettered"] == 1 and found, what="dlq"
        )
        assert refused["failed_by_kind"] == {"connect": 1}
        untrusted_state = wait_until(
            lambda: (found := state(http, "self-signed"))["dead_lettered"] == 1 and found, what="dlq"
        )
        assert untrusted_state["failed_by_kind"] == {"tls": 1}
        assert untrusted.received == []  # the certificate is not trusted: nothing was sent
