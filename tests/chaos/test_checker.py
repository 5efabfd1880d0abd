"""The chaos checker over small histories built here: a clean run passes, and each broken promise
is named with its ids."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.chaos.checker import EFFECT_S, DuplicateCause, Report, check

ROOT = Path(__file__).resolve().parents[2]
GROUPS = {"g1": "group", "o1": "ordered", "p1": "pop"}
BOUND_S = 30.0


class Run:
    """A synthetic history: each event 0.1 s after the one before, unless ``wait`` moves the clock."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.t = 0.0
        self.sent: dict[str, dict[str, Any]] = {}
        self.offsets: dict[tuple[str, int], int] = {}

    def add(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.t = round(self.t + 0.1, 4)
        event = {"t": self.t, "kind": kind, **fields}
        self.events.append(event)
        return event

    def wait(self, seconds: float) -> None:
        self.t = round(self.t + seconds, 4)

    def send(
        self,
        id_: str,
        status: str = "SEND_OK",
        key: str | None = None,
        seq: int | None = None,
        queue_id: int = 0,
    ) -> dict[str, Any]:
        """One send attempt; an answered one is stored at the next offset of broker-a's queue."""
        place: dict[str, Any] = {"broker_name": None, "queue_id": None, "queue_offset": None}
        if status != "error":
            offset = self.offsets.get(("broker-a", queue_id), 0)
            self.offsets[("broker-a", queue_id)] = offset + 1
            place = {"broker_name": "broker-a", "queue_id": queue_id, "queue_offset": offset}
        event = self.add(
            "send", process="producer-1", id=id_, key=key, seq=seq, status=status, error=None, **place
        )
        if status != "error" or id_ not in self.sent:
            self.sent[id_] = event
        return event

    def deliver(
        self, group: str, id_: str, process: str | None = None, reconsume_times: int = 0, **place: Any
    ) -> dict[str, Any]:
        """``group`` receives ``id_`` from where its latest send attempt stored it, unless ``place`` says."""
        sent = self.sent.get(id_, {})
        where = {name: sent.get(name) for name in ("broker_name", "queue_id", "queue_offset")} | place
        return self.add(
            "deliver",
            process=process or f"{group}-1",
            group=group,
            mode=GROUPS[group],
            id=id_,
            key=sent.get("key"),
            seq=sent.get("seq"),
            reconsume_times=reconsume_times,
            **where,
        )

    def ha(self, name: str, broker_id: int, role: str, epoch: int) -> None:
        self.add("ha", broker_name=name, broker_id=broker_id, role=role, epoch=epoch)

    def finish(self, equal: bool = True) -> None:
        for name in ("broker-a", "broker-b"):
            self.add(
                "converged", broker_name=name, equal=equal, detail="3 replicas" if equal else "bytes differ"
            )
        self.add("end")


def started() -> Run:
    run = Run()
    run.add("groups", groups=GROUPS)
    for name in ("broker-a", "broker-b"):
        run.ha(name, 0, "SYNC_MASTER", 1)
        run.ha(name, 1, "SLAVE", 1)
        run.ha(name, 2, "SLAVE", 1)
    return run


def consume_all(run: Run, ids: list[str]) -> None:
    """Every group receives each id once, commits, and the pop group acks."""
    for group in GROUPS:
        for id_ in ids:
            run.deliver(group, id_)
            if group == "p1":
                run.add("ack", process="p1-1", group="p1", id=id_, ok=True)
        if group != "p1":
            run.add("commit", process=f"{group}-1", group=group, ok=True, reason=None)


def clean(faults: bool = True) -> Run:
    """Plain and keyed sends, every group fed once; with ``faults`` a master is killed and replaced
    in epoch 2 meanwhile."""
    run = started()
    for group in ("g1", "o1"):
        run.add("rebalance", process=f"{group}-1", group=group, generation=1, queues=["broker-a:0"])
    run.send("m-0")
    run.send("m-1")
    if faults:
        run.add("fault", fault="kill", target="broker-a/0")
    run.send("k-0", status="SLAVE_NOT_AVAILABLE", key="k", seq=0)
    if faults:
        run.ha("broker-a", 1, "SYNC_MASTER", 2)
    run.send("k-0", key="k", seq=0)
    run.send("k-1", key="k", seq=1)
    if faults:
        run.add("fault", fault="restart", target="broker-a/0")
        run.ha("broker-a", 0, "SLAVE", 2)
    run.send("k-2", key="k", seq=2)
    consume_all(run, ["m-0", "m-1", "k-0", "k-1", "k-2"])
    return run


def checked(run: Run, bound_s: float = BOUND_S) -> Report:
    return check(run.events, bound_s)


def only_violation(report: Report, kind: str) -> str:
    assert len(report.violations) == 1, report.violations
    assert report.violations[0].startswith(f"{kind}:"), report.violations
    return report.violations[0]


def duplicates(report: Report) -> dict[str, int]:
    counts = report.summary["duplicates"]
    assert isinstance(counts, dict)
    return counts


def longest_unavailability_s(report: Report) -> float:
    seconds = report.summary["longest unavailability s"]
    assert isinstance(seconds, float)
    return seconds


def without(run: Run, **match: Any) -> Run:
    run.events = [e for e in run.events if any(e.get(name) != value for name, value in match.items())]
    return run


def test_clean_history_passes() -> None:
    report = checked(clean_finished())
    assert report.ok, report.violations
    assert report.summary["acknowledged ids"] == 5
    assert report.summary["maybe-stored ids"] == 0
    assert report.summary["delivered ids"] == {"g1": 5, "o1": 5, "p1": 5}
    assert report.summary["duplicates"] == dict.fromkeys(DuplicateCause, 0)
    assert report.summary["faults"] == {"kill": 1, "restart": 1}
    assert report.summary["epochs"] == {"broker-a": 2, "broker-b": 1}
    assert "OK: no violations" in report.table()


def clean_finished() -> Run:
    run = clean()
    run.finish()
    return run


def test_dropped_delivery_is_lost() -> None:
    report = checked(without(clean_finished(), kind="deliver", group="o1", id="m-1"))
    assert "m-1" in only_violation(report, "lost")
    assert "'o1'" in report.violations[0]
    assert report.summary["lost ids"] == 1


def test_maybe_stored_id_need_not_be_delivered() -> None:
    run = clean()
    run.send("m-9", status="FLUSH_SLAVE_TIMEOUT")
    run.send("m-10", status="error")
    run.send("m-0")  # resent without cause is still one acknowledged id
    run.finish()
    report = checked(run)
    assert report.ok, report.violations
    assert report.summary["maybe-stored ids"] == 2


def test_delivery_of_unsent_id_is_phantom() -> None:
    run = clean()
    run.deliver("g1", "ghost-1", broker_name="broker-b", queue_id=3, queue_offset=7)
    run.finish()
    sentence = only_violation(checked(run), "phantom")
    assert "ghost-1" in sentence and "broker-b q3@7" in sentence


def test_swapped_first_deliveries_of_a_key_break_order() -> None:
    run = clean()
    keyed = [e for e in run.events if e["kind"] == "deliver" and e["group"] == "o1" and e["key"] == "k"]
    keyed[0]["t"], keyed[1]["t"] = keyed[1]["t"], keyed[0]["t"]  # k-1 first, then k-0
    run.finish()
    report = checked(run)
    sentence = only_violation(report, "order")
    assert "seq 0 (k-0" in sentence and "after seq 1 (k-1" in sentence
    assert report.summary["reordered keys"] == 1


def test_only_ordered_groups_promise_order() -> None:
    run = clean()
    keyed = [e for e in run.events if e["kind"] == "deliver" and e["group"] == "g1" and e["key"] == "k"]
    keyed[0]["t"], keyed[2]["t"] = keyed[2]["t"], keyed[0]["t"]
    run.finish()
    assert checked(run).ok


def test_redelivered_earlier_seq_after_rebalance_keeps_order() -> None:
    run = clean()
    run.add("rebalance", process="o1-2", group="o1", generation=2, queues=["broker-a:0"])
    run.deliver("o1", "k-1", process="o1-2")
    run.deliver("o1", "k-2", process="o1-2")
    run.finish()
    report = checked(run)
    assert report.ok, report.violations
    assert duplicates(report)[DuplicateCause.REBALANCE] == 2


def test_duplicate_without_cause_is_unexplained() -> None:
    run = clean()
    run.wait(BOUND_S + 1)  # the restart is too long ago to explain it
    run.deliver("g1", "m-1")
    run.finish()
    report = checked(run)
    sentence = only_violation(report, "duplicate")
    assert "'g1'" in sentence and "m-1" in sentence
    assert duplicates(report)[DuplicateCause.UNEXPLAINED] == 1


def rebalance(run: Run) -> None:
    run.add("rebalance", process="g1-1", group="g1", generation=2, queues=["broker-a:0"])


def failed_commit(run: Run) -> None:
    run.add("commit", process="g1-1", group="g1", ok=False, reason="fenced")


def fault(run: Run) -> None:
    run.add("fault", fault="pause", target="broker-a/1")


def resend(run: Run) -> None:
    """The producer resent m-1 after an unknown outcome, stored at a second position."""
    run.send("m-1", status="FLUSH_SLAVE_TIMEOUT")


@pytest.mark.parametrize(
    ("cause", "between"),
    [
        (DuplicateCause.REBALANCE, rebalance),
        (DuplicateCause.FAILED_COMMIT, failed_commit),
        (DuplicateCause.FAULT, fault),
        (DuplicateCause.STORED_TWICE, resend),
    ],
)
def test_duplicate_with_a_cause_is_explained(cause: DuplicateCause, between: Callable[[Run], None]) -> None:
    run = clean(faults=False)
    between(run)
    run.deliver("g1", "m-1")
    run.finish()
    report = checked(run)
    assert report.ok, report.violations
    assert duplicates(report)[cause] == 1


def test_fault_shortly_before_both_deliveries_explains_a_duplicate() -> None:
    """A failover makes the new master serve from the last committed offset, a while after the fault."""
    run = clean()
    run.wait(BOUND_S + 1)
    run.send("m-5")
    run.add("fault", fault="cut_registry", target="broker-a/0")
    run.wait(EFFECT_S / 2)
    consume_all(run, ["m-5"])
    run.deliver("g1", "m-5")
    run.finish()
    report = checked(run)
    assert report.ok, report.violations
    assert duplicates(report)[DuplicateCause.FAULT] == 1


def test_a_fault_long_before_both_deliveries_explains_no_duplicate() -> None:
    run = clean()
    run.wait(BOUND_S + 1)
    run.send("m-5")
    run.add("fault", fault="cut_registry", target="broker-a/0")
    run.wait(EFFECT_S * 2)
    consume_all(run, ["m-5"])
    run.deliver("g1", "m-5")
    run.finish()
    assert only_violation(checked(run), "duplicate")


def test_same_copy_of_a_resent_id_is_not_a_second_copy() -> None:
    run = clean(faults=False)
    first = next(e for e in run.events if e["kind"] == "deliver" and e["group"] == "g1" and e["id"] == "m-1")
    resend(run)
    run.deliver("g1", "m-1", broker_name="broker-a", queue_id=0, queue_offset=first["queue_offset"])
    run.finish()
    assert only_violation(checked(run), "duplicate")


def test_rebalance_overlap_of_two_members_explains_a_duplicate() -> None:
    """The new owner starts from the committed offset before the old one has noticed it lost the queue."""
    run = started()
    run.send("m-0")
    run.add("rebalance", process="g1-2", group="g1", generation=2, queues=["broker-a:0"])
    run.deliver("g1", "m-0", process="g1-2")
    run.deliver("g1", "m-0", process="g1-1")
    run.add("rebalance", process="g1-1", group="g1", generation=2, queues=[])
    for group in ("o1", "p1"):
        run.deliver(group, "m-0")
    run.finish()
    report = checked(run)
    assert report.ok, report.violations
    assert duplicates(report)[DuplicateCause.REBALANCE] == 1


def test_pop_redelivery_without_an_ack_is_explained() -> None:
    run = clean()
    run.wait(BOUND_S + 1)
    run.send("m-5")
    run.deliver("p1", "m-5")
    run.add("ack", process="p1-1", group="p1", id="m-5", ok=False)
    run.deliver("p1", "m-5", reconsume_times=1)
    run.add("ack", process="p1-1", group="p1", id="m-5", ok=True)
    run.deliver("p1", "m-5", reconsume_times=1)  # acked, and no fault since
    for group in ("g1", "o1"):
        run.deliver(group, "m-5")
    run.finish()
    report = checked(run)
    assert "m-5" in only_violation(report, "duplicate")
    assert duplicates(report)[DuplicateCause.POP_REDELIVERY] == 1


def test_two_masters_in_one_epoch() -> None:
    run = clean()
    run.ha("broker-b", 2, "SYNC_MASTER", 1)
    run.finish()
    sentence = only_violation(checked(run), "two masters")
    assert "broker-b epoch 1" in sentence and "0 (first" in sentence and "2 (first" in sentence


def test_gap_between_acknowledgements_with_failed_sends_is_unavailability() -> None:
    run = clean()
    run.send("m-5", status="error")
    run.wait(BOUND_S)
    run.send("m-5", status="error")
    run.send("m-5")
    run.deliver("g1", "m-5")
    run.deliver("o1", "m-5")
    run.deliver("p1", "m-5")
    run.finish()
    report = checked(run)
    assert "without a SEND_OK" in only_violation(report, "unavailable")
    assert longest_unavailability_s(report) > BOUND_S


def test_idle_producers_are_not_unavailability() -> None:
    run = clean()
    run.wait(BOUND_S * 2)
    run.send("m-5")
    consume_all(run, ["m-5"])
    run.finish()
    report = checked(run)
    assert report.ok, report.violations
    assert longest_unavailability_s(report) < 1


def test_sends_failing_to_the_end_are_unavailability() -> None:
    run = clean()
    run.add("fault", fault="cut_replication", target="broker-a/1")
    for _ in range(3):
        run.wait(BOUND_S / 2)
        run.send("m-7", status="SLAVE_NOT_AVAILABLE")
    run.finish()
    assert "none after" in only_violation(checked(run), "unavailable")


def test_send_hung_by_a_fault_is_unavailability() -> None:
    """No send is answered at all while the paused master holds them: the time from the fault counts."""
    run = clean()
    run.add("fault", fault="pause", target="broker-a/1")
    run.wait(BOUND_S + 5)
    run.send("m-7")
    consume_all(run, ["m-7"])
    run.finish()
    assert "after fault pause broker-a/1" in only_violation(checked(run), "unavailable")


def test_unequal_replicas_after_healing() -> None:
    run = clean()
    run.finish(equal=False)
    report = checked(run)
    assert len(report.violations) == 2
    assert all(v.startswith("divergent:") and "bytes differ" in v for v in report.violations)


def test_replicas_never_compared() -> None:
    report = checked(without(clean_finished(), kind="converged", broker_name="broker-b"))
    assert "broker-b" in only_violation(report, "divergent")


def test_run_without_end_did_not_finish() -> None:
    run = clean()
    run.add("stalled", missing={"o1": 3})
    sentence = only_violation(checked(run), "unfinished")
    assert "stalled" in sentence


def test_event_without_its_fields_is_malformed() -> None:
    run = clean_finished()
    run.events.insert(3, {"t": 0.35, "kind": "send", "status": "SEND_OK"})
    assert "lacks id" in only_violation(checked(run), "malformed")


def test_command_line_exit_status(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_bytes(b"\n".join(orjson.dumps(event) for event in clean_finished().events) + b"\n")
    bad.write_bytes(b"\n".join(orjson.dumps(event) for event in clean().events) + b'\n{"t": 9.9, "ki')
    command = [sys.executable, "-m", "tests.chaos.checker"]
    passed = subprocess.run([*command, str(good)], cwd=ROOT, capture_output=True, text=True, timeout=30)
    failed = subprocess.run(
        [*command, str(bad), "--bound-s", "5"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "OK: no violations" in passed.stdout
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "unfinished:" in failed.stdout and "is not a JSON object" in failed.stdout
