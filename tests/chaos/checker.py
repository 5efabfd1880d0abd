"""The checker of a nemesis run: a pure function over its history that names every broken promise.

``check(events, bound_s)`` reads the operations a run recorded (tests/chaos/history.py, one JSON
object per line) and returns a ``Report``: the violations, each a sentence naming ids and times, and
the counts of the summary table.

    python -m tests.chaos.checker HISTORY.jsonl [--bound-s 30]

prints the table and exits 1 on any violation, 0 otherwise. The properties:

    lost         an acknowledged id (a SEND_OK line) that a declared group never received
    phantom      a received id that no send line has, whatever its status
    order        per key of an "ordered" group, a seq first received after a higher seq was
    duplicate    an id a group received again with no cause to explain it (``DuplicateCause``)
    two masters  one (broker name, epoch) claimed by two broker ids
    unavailable  the longest time without a SEND_OK while producers kept trying, above bound_s
    divergent    replicas of a broker name not byte-identical after healing, or never compared
    unfinished   no "end" line, or an event without the fields its kind needs

Events are read in the order of their "t" (a stable sort keeps the file's order for equal times);
kinds the checker does not know ("run", "stalled", ...) are counted and otherwise left alone.
"""

from __future__ import annotations

import argparse
import bisect
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

import orjson

Event = Mapping[str, Any]
Position = tuple[str, int, int]  # broker name, queue id, queue offset: where one copy is stored
SummaryValue = int | float | dict[str, int]

SEND_OK = "SEND_OK"
MASTER_ROLES = frozenset({"SYNC_MASTER", "ASYNC_MASTER"})
DESCRIPTION = "Check a nemesis run's history; exit 1 on any violation."
# How long a fault or a rebalance explains a redelivery after it: a failover takes a few times
# WHARF_HA_FAILOVER_S (2 s in the run), a member learns of a rebalance at its next poll.
EFFECT_S = 10.0
LISTED_IDS = 20  # ids named in one sentence; the summary keeps the exact counts
LISTED_SENTENCES = 50  # sentences of one property; one more sentence counts the rest
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "send": ("id", "status"),
    "deliver": ("process", "group", "id"),
    "commit": ("group", "ok"),
    "rebalance": ("group",),
    "ack": ("group", "id", "ok"),
    "fault": ("fault", "target"),
    "ha": ("broker_name", "broker_id", "role"),  # a broker not registered yet may have no epoch
    "groups": ("groups",),
    "converged": ("broker_name", "equal"),
    "end": (),
}


class DuplicateCause(StrEnum):
    """Why a group received an id again, the first that applies in this order."""

    STORED_TWICE = "stored twice"  # a copy at a position not received before, from a resend
    POP_REDELIVERY = "pop redelivery"  # reconsume_times grew, or no ack succeeded in between
    REBALANCE = "rebalance"
    FAILED_COMMIT = "failed commit"
    FAULT = "fault"  # between the two, or within EFFECT_S before the later one
    UNEXPLAINED = "unexplained"


class Send(NamedTuple):
    t: float
    process: str
    id: str
    key: str | None
    seq: int | None
    ok: bool
    position: Position | None


class Delivery(NamedTuple):
    """One receipt of a message by a group's member; ``mode`` is the deliver line's own."""

    t: float
    process: str
    group: str
    mode: str
    id: str
    key: str | None
    seq: int | None
    position: Position | None
    reconsume_times: int

    def describe(self) -> str:
        where = "unknown position" if self.position is None else "{} q{}@{}".format(*self.position)
        return f"t={self.t:.3f} by {self.process} ({where})"


@dataclass(frozen=True)
class Outage:
    """A stretch without a SEND_OK while sends were being answered (or a fault waited for one)."""

    start_t: float
    end_t: float
    reason: str

    @property
    def seconds(self) -> float:
        return self.end_t - self.start_t


@dataclass(frozen=True)
class Report:
    """What ``check`` found: ``ok`` when ``violations`` is empty, ``summary`` for the table."""

    violations: list[str]
    summary: dict[str, SummaryValue]
    bound_s: float

    @property
    def ok(self) -> bool:
        return not self.violations

    def table(self) -> str:
        """The summary as aligned rows, then OK or every violation."""
        width = max(len(name) for name in self.summary)
        lines = [f"Wharf chaos check (bound {self.bound_s:g} s)"]
        for name, value in self.summary.items():
            if isinstance(value, dict):
                shown = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
            elif isinstance(value, float):
                shown = f"{value:.3f}"
            else:
                shown = str(value)
            lines.append(f"  {name.ljust(width)}  {shown}")
        if self.ok:
            lines.append("OK: no violations")
        else:
            lines.append(f"FAILED: {len(self.violations)} violation(s)")
            lines.extend(f"  - {violation}" for violation in self.violations)
        return "\n".join(lines)


@dataclass
class History:
    """The events of a run, indexed the way the properties read them."""

    kinds: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)  # group -> mode, from the "groups" line
    declared: bool = False
    sends: list[Send] = field(default_factory=list)
    acknowledged: dict[str, Send] = field(default_factory=dict)  # id -> its first SEND_OK
    deliveries: list[Delivery] = field(default_factory=list)
    received: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # group -> ids
    rebalance_ts: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failed_commit_ts: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    acked_ts: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    faults: list[Event] = field(default_factory=list)
    # (broker name, epoch) -> broker id -> when it was first seen in a master role
    masters: dict[tuple[str, int], dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    epochs: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    converged: dict[str, Event] = field(default_factory=dict)
    end: Event | None = None
    last: Event | None = None

    @classmethod
    def index(cls, events: Iterable[Event]) -> History:
        history = cls()
        valid: list[Event] = []
        for number, event in enumerate(events, start=1):
            problem = malformation(event)
            if problem:
                history.problems.append(f"malformed: event #{number} {problem}: {abbreviate(event)}")
            else:
                valid.append(event)
        for event in sorted(valid, key=lambda e: float(e["t"])):
            history.add(event)
        return history

    def add(self, event: Event) -> None:
        kind, t = event["kind"], float(event["t"])
        self.kinds[kind] += 1
        self.last = event
        if kind == "send":
            ok = event["status"] == SEND_OK
            key, seq = event.get("key"), event.get("seq")
            send = Send(t, str(event.get("process")), event["id"], key, seq, ok, position(event))
            self.sends.append(send)
            if ok:
                self.acknowledged.setdefault(send.id, send)
        elif kind == "deliver":
            group, id_, key, seq = event["group"], event["id"], event.get("key"), event.get("seq")
            mode, reconsume_times = str(event.get("mode")), event.get("reconsume_times") or 0
            where = position(event)
            self.deliveries.append(
                Delivery(t, event["process"], group, mode, id_, key, seq, where, reconsume_times)
            )
            self.received[group].add(id_)
        elif kind == "rebalance":
            self.rebalance_ts[event["group"]].append(t)
        elif kind == "commit" and not event["ok"]:
            self.failed_commit_ts[event["group"]].append(t)
        elif kind == "ack" and event["ok"]:
            self.acked_ts[(event["group"], event["id"])].append(t)
        elif kind == "fault":
            self.faults.append(event)
        elif kind == "ha" and event.get("epoch") is not None:
            name, epoch = event["broker_name"], int(event["epoch"])
            self.epochs[name].add(epoch)
            if event["role"] in MASTER_ROLES:
                self.masters[(name, epoch)].setdefault(int(event["broker_id"]), t)
        elif kind == "groups":
            self.groups.update(event["groups"])
            self.declared = True
        elif kind == "converged":
            self.converged[event["broker_name"]] = event
        elif kind == "end":
            self.end = event

    def mode(self, delivery: Delivery) -> str:
        """The group's declared mode, else the one its deliver line gives."""
        return self.groups.get(delivery.group, delivery.mode)


def check(events: Iterable[Event], bound_s: float = 30.0) -> Report:
    """Every violation in a run's history, and the counts of its summary table."""
    history = History.index(events)
    violations = list(history.problems)
    lost, lost_ids = check_lost(history)
    phantom, phantom_ids = check_phantoms(history)
    order, reordered_keys = check_order(history)
    duplicates, causes = check_duplicates(history)
    masters = check_masters(history)
    outage = longest_outage(history)
    for found in (lost, phantom, order, duplicates, masters):
        violations.extend(found)
    if outage is not None and outage.seconds > bound_s:
        violations.append(
            f"unavailable: {outage.seconds:.3f} s without a SEND_OK, above the bound of {bound_s:g} s: "
            f"from t={outage.start_t:.3f} to t={outage.end_t:.3f} ({outage.reason})"
        )
    violations.extend(check_convergence(history))
    violations.extend(check_finished(history))
    groups = sorted(set(history.groups) | set(history.received))
    summary: dict[str, SummaryValue] = {
        "operations": dict(sorted(history.kinds.items())),
        "sends": len(history.sends),
        "acknowledged ids": len(history.acknowledged),
        "maybe-stored ids": len({send.id for send in history.sends} - set(history.acknowledged)),
        "delivered ids": {group: len(history.received[group]) for group in groups},
        "lost ids": len(lost_ids),
        "phantom ids": len(phantom_ids),
        "reordered keys": reordered_keys,
        "duplicates": {cause.value: causes[cause] for cause in DuplicateCause},
        "faults": dict(sorted(Counter(str(fault["fault"]) for fault in history.faults).items())),
        "longest unavailability s": round(outage.seconds, 3) if outage else 0.0,
        "epochs": {name: len(epochs) for name, epochs in sorted(history.epochs.items())},
        "violations": len(violations),
    }
    return Report(violations, summary, bound_s)


def check_lost(history: History) -> tuple[list[str], set[str]]:
    sentences: list[str] = []
    lost: set[str] = set()
    if not history.declared:
        sentences.append("malformed: no groups line, so no group is known to owe every acknowledged id")
    for group in sorted(history.groups):
        missing = [send for send in history.acknowledged.values() if send.id not in history.received[group]]
        lost.update(send.id for send in missing)
        if missing:
            named = [f"{send.id} (SEND_OK t={send.t:.3f} by {send.process})" for send in missing]
            sentences.append(
                f"lost: {len(missing)} acknowledged id(s) never delivered to group {group!r} "
                f"({history.groups[group]}): {listing(named)}"
            )
    if history.declared:
        for group in sorted(set(history.received) - set(history.groups)):
            sentences.append(
                f"malformed: group {group!r} received messages but the groups line does not declare it"
            )
    return sentences, lost


def check_phantoms(history: History) -> tuple[list[str], set[str]]:
    sent = {send.id for send in history.sends}
    first: dict[str, Delivery] = {}
    for delivery in history.deliveries:
        if delivery.id not in sent:
            first.setdefault(delivery.id, delivery)
    if not first:
        return [], set()
    named = [f"{delivery.id} (group {delivery.group!r} {delivery.describe()})" for delivery in first.values()]
    return [f"phantom: {len(first)} delivered id(s) that no send line has: {listing(named)}"], set(first)


def check_order(history: History) -> tuple[list[str], int]:
    """Per (ordered group, key), the seqs in the order each was first received must increase: a
    redelivery of a seen seq is free, a seq first seen after a higher one is not."""
    sent = {send.id: (send.key, send.seq) for send in history.sends if send.key is not None}
    first: dict[tuple[str, str], dict[int, Delivery]] = defaultdict(dict)
    for delivery in history.deliveries:
        if history.mode(delivery) != "ordered":
            continue
        key, seq = sent.get(delivery.id, (delivery.key, delivery.seq))
        if key is not None and seq is not None:
            first[(delivery.group, key)].setdefault(seq, delivery)
    sentences = []
    for (group, key), seen in first.items():
        highest: tuple[int, Delivery] | None = None
        late: list[str] = []
        for seq, delivery in seen.items():
            if highest is not None and seq < highest[0]:
                late.append(
                    f"seq {seq} ({delivery.id}, {delivery.describe()}) after seq {highest[0]} "
                    f"({highest[1].id}, {highest[1].describe()})"
                )
            elif highest is None or seq > highest[0]:
                highest = (seq, delivery)
        if late:
            sentences.append(f"order: group {group!r} key {key!r} first received {listing(late)}")
    return capped("order", sentences), len(sentences)


def check_duplicates(history: History) -> tuple[list[str], Counter[DuplicateCause]]:
    """Each delivery of an id to a group after its first gets a cause; "unexplained" is a violation."""
    resent = {id_ for id_, count in Counter(send.id for send in history.sends).items() if count > 1}
    fault_ts = [float(fault["t"]) for fault in history.faults]
    by_id: dict[tuple[str, str], list[Delivery]] = defaultdict(list)
    for delivery in history.deliveries:
        by_id[(delivery.group, delivery.id)].append(delivery)
    causes: Counter[DuplicateCause] = Counter()
    sentences = []
    for (group, id_), deliveries in by_id.items():
        positions = {deliveries[0].position}
        for earlier, later in pairwise(deliveries):
            new_copy = id_ in resent and later.position is not None and later.position not in positions
            cause = duplicate_cause(
                history, earlier, later, new_copy=new_copy, fault_ts=fault_ts, window_s=EFFECT_S
            )
            positions.add(later.position)
            causes[cause] += 1
            if cause is DuplicateCause.UNEXPLAINED:
                sentences.append(
                    f"duplicate: group {group!r} received {id_} again at {later.describe()} after "
                    f"{earlier.describe()}, with no new stored copy, pop nack, rebalance, failed commit "
                    "or fault to explain it"
                )
    return capped("duplicate", sentences), causes


def duplicate_cause(
    history: History,
    earlier: Delivery,
    later: Delivery,
    *,
    new_copy: bool,
    fault_ts: list[float],
    window_s: float,
) -> DuplicateCause:
    group = later.group
    if new_copy:
        return DuplicateCause.STORED_TWICE
    if history.mode(later) == "pop" and (
        later.reconsume_times > earlier.reconsume_times
        or not any_within(history.acked_ts.get((group, later.id), []), earlier.t, later.t)
    ):
        return DuplicateCause.POP_REDELIVERY
    # A member learns of a rebalance only at its next poll, so the old and the new owner of a queue
    # overlap: between two members any rebalance of the group within window_s explains it.
    rebalances = history.rebalance_ts.get(group, [])
    if any_within(rebalances, earlier.t, later.t) or (
        earlier.process != later.process and any_within(rebalances, earlier.t - window_s, later.t + window_s)
    ):
        return DuplicateCause.REBALANCE
    if any_within(history.failed_commit_ts.get(group, []), earlier.t, later.t):
        return DuplicateCause.FAILED_COMMIT
    if any_within(fault_ts, min(earlier.t, later.t - window_s), later.t):
        return DuplicateCause.FAULT
    return DuplicateCause.UNEXPLAINED


def check_masters(history: History) -> list[str]:
    sentences = []
    for (name, epoch), ids in sorted(history.masters.items()):
        if len(ids) > 1:
            claims = " and ".join(f"{broker_id} (first at t={t:.3f})" for broker_id, t in sorted(ids.items()))
            sentences.append(f"two masters: {name} epoch {epoch} was claimed by broker ids {claims}")
    return sentences


def longest_outage(history: History) -> Outage | None:
    """The longest of: a gap between consecutive SEND_OKs in which some send was answered otherwise
    (also before the first and after the last SEND_OK), and the time from each fault to the next
    SEND_OK (to the last send answered, when none follows; not counted when no send follows)."""
    outages: list[Outage] = []
    since: float | None = None  # the last SEND_OK, or the first failure when none came yet
    failures, last_failed_t = 0, 0.0
    for send in history.sends:
        if send.ok:
            if failures and since is not None:
                outages.append(Outage(since, send.t, f"{failures} send(s) not answered SEND_OK in between"))
            since, failures = send.t, 0
        else:
            since = send.t if since is None else since
            failures, last_failed_t = failures + 1, send.t
    if failures and since is not None:
        outages.append(Outage(since, last_failed_t, f"{failures} send(s) not answered SEND_OK, none after"))
    ok_ts = [send.t for send in history.sends if send.ok]
    send_ts = [send.t for send in history.sends]
    for fault in history.faults:
        t = float(fault["t"])
        what = f"after fault {fault['fault']} {fault['target']}"
        following = bisect.bisect_right(ok_ts, t)
        if following < len(ok_ts):
            outages.append(Outage(t, ok_ts[following], f"{what} until the next SEND_OK"))
        elif send_ts and send_ts[-1] > t:
            outages.append(Outage(t, send_ts[-1], f"{what}: no SEND_OK after it"))
    return max(outages, key=lambda outage: outage.seconds, default=None)


def check_convergence(history: History) -> list[str]:
    sentences = [
        f"divergent: replicas of {name} differ after healing (t={event['t']:.3f}): {event.get('detail')}"
        for name, event in sorted(history.converged.items())
        if not event["equal"]
    ]
    if history.end is not None:
        for name in sorted(set(history.epochs) - set(history.converged)):
            sentences.append(f"divergent: the replicas of {name} were never compared (no converged line)")
    return sentences


def check_finished(history: History) -> list[str]:
    if history.end is not None:
        return []
    if history.last is None:
        return ["unfinished: the history is empty"]
    return [f"unfinished: the run did not finish (no end line; last event {abbreviate(history.last)})"]


def malformation(event: object) -> str | None:
    if not isinstance(event, Mapping):
        return "is not an object"
    if not isinstance(event.get("t"), int | float) or not isinstance(event.get("kind"), str):
        return "lacks a numeric t or a kind"
    missing = [name for name in REQUIRED_FIELDS.get(event["kind"], ()) if event.get(name) is None]
    return f"({event['kind']}) lacks {', '.join(missing)}" if missing else None


def position(event: Event) -> Position | None:
    name, queue_id, offset = event.get("broker_name"), event.get("queue_id"), event.get("queue_offset")
    if name is None or queue_id is None or offset is None:
        return None
    return (str(name), int(queue_id), int(offset))


def any_within(sorted_ts: list[float], start: float, end: float) -> bool:
    return bisect.bisect_left(sorted_ts, start) < bisect.bisect_right(sorted_ts, end)


def listing(items: Sequence[str]) -> str:
    shown = "; ".join(items[:LISTED_IDS])
    return shown if len(items) <= LISTED_IDS else f"{shown}; and {len(items) - LISTED_IDS} more"


def capped(name: str, sentences: list[str]) -> list[str]:
    if len(sentences) <= LISTED_SENTENCES:
        return sentences
    rest = len(sentences) - LISTED_SENTENCES
    return [*sentences[:LISTED_SENTENCES], f"{name}: {rest} more like these (see the summary counts)"]


def abbreviate(event: object, limit: int = 200) -> str:
    text = orjson.dumps(event, default=str).decode() if isinstance(event, Mapping) else repr(event)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_history(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The events of a history file, and a sentence for each line that is not a JSON object (the
    last line of a run killed while writing may be cut)."""
    events: list[dict[str, Any]] = []
    problems = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            event = None
        if isinstance(event, dict):
            events.append(event)
        else:
            problems.append(f"malformed: line {number} of {path} is not a JSON object: {line[:80]!r}")
    return events, problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.checker", description=DESCRIPTION)
    parser.add_argument("history", type=Path, help="the run's history, one JSON object per line")
    parser.add_argument("--bound-s", type=float, default=30.0, help="the longest allowed unavailability")
    args = parser.parse_args(argv)
    events, problems = load_history(args.history)
    report = check(events, args.bound_s)
    if problems:
        violations = problems + report.violations
        report = replace(
            report, violations=violations, summary={**report.summary, "violations": len(violations)}
        )
    print(report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
