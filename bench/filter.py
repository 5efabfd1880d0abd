"""Filter benchmark: how fast a read scans a queue through a SQL92 filter, against the unfiltered
read of the same data.

Run from the repository root::

    .venv/bin/python -m bench.filter [--quick] [--json out.json]

In-process, no HTTP: one queue of a store in a scratch directory on the repository's disk is
filled once with small messages (64 B bodies) that carry what a producer's message would: a
TAGS (one of 16), a unique id, and two user properties, ``region`` (one of 8) and ``amount``
(0-999). Each repeat then reads the whole queue from offset 0 with ``get_message`` (32 messages
per call, the default scan slice), as a consumer's pulls do, once per row, rows interleaved repeat
by repeat:

* ``unfiltered``: the baseline, every message handed out.
* ``tag``: a tag filter naming 1 of the 16 tags (the ConsumeQueue's tag hash skips the rest).
* ``sql92 selective``: ``region = 'eu' AND amount >= 900`` (about 1 in 80 match); every record is
  read, and those whose encoded properties hold ``region=eu`` (1 in 8) are decoded.
* ``sql92 selective, no name=value prefilter``: the same with that check left out: every record's
  properties are decoded and the expression evaluated.
* ``sql92 + tag prefilter``: ``TAGS = 't3' AND amount >= 500`` (about 1 in 32): the TAGS
  condition lets the tag hash skip 15 of 16 records before any is read.
* ``sql92 all``: ``amount >= 0``, true of every message: the whole cost of evaluating.

Figures are messages scanned per second (queue entries passed, matching or not), the median of
the repeats, each also as a ratio to ``unfiltered``. Then the cost of compiling an expression,
uncached and from the cache.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from app.broker import sql92
from app.broker.sql92 import compile_sql92
from app.store import Message, MessageFilter, MessageStore, StoreConfig, TagFilter
from bench import harness
from bench.harness import Result, Stopwatch

TOPIC = "filter-bench"
BATCH = 1_000  # messages per append
READ = 32  # messages per get_message, as a pull


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    messages: int
    compiles: int


FULL = Plan(repeats=5, messages=200_000, compiles=2_000)
QUICK = replace(FULL, repeats=2, messages=40_000, compiles=300)

SELECTIVE = "region = 'eu' AND amount >= 900"
ROWS: list[tuple[str, Callable[[], MessageFilter | None]]] = [
    ("unfiltered", lambda: None),
    ("tag (1 of 16 tags)", lambda: TagFilter.parse("t3")),
    ("sql92 selective: region = 'eu' AND amount >= 900", lambda: compile_sql92(SELECTIVE)),
    ("sql92 selective, no name=value prefilter", lambda: replace(compile_sql92(SELECTIVE), needles=())),
    (
        "sql92 + tag prefilter: TAGS = 't3' AND amount >= 500",
        lambda: compile_sql92("TAGS = 't3' AND amount >= 500"),
    ),
    ("sql92 all: amount >= 0", lambda: compile_sql92("amount >= 0")),
]


def fill(store: MessageStore, count: int) -> None:
    regions = ["eu", "us", "apac", "latam", "mea", "cn", "in", "au"]
    body = b"x" * 64
    for start in range(0, count, BATCH):
        batch = []
        for i in range(start, min(start + BATCH, count)):
            properties = {
                "TAGS": f"t{i % 16}",
                "UNIQ_KEY": f"{i:032x}",
                "region": regions[(i // 16) % 8],
                "amount": str(i * 7919 % 1000),
            }
            batch.append(Message(TOPIC, body, queue_id=0, properties=properties))
        store.append(batch)


def scan(store: MessageStore, message_filter: MessageFilter | None) -> tuple[float, int]:
    """Seconds to read the whole queue through the filter, and how many messages matched."""
    end = store.max_offset(TOPIC, 0)
    offset, matched = 0, 0
    with Stopwatch() as watch:
        while offset < end:
            result = store.get_message(TOPIC, 0, offset, READ, message_filter)
            matched += len(result.records)
            offset = result.next_offset
    return watch.seconds, matched


def compile_rates(plan: Plan) -> list[Result]:
    expressions = [
        f"region = 'eu' AND amount BETWEEN {i} AND {i + 100} OR TAGS IN ('t{i % 16}')"
        for i in range(plan.compiles)
    ]
    uncached, cached = [], []
    for _ in range(plan.repeats):
        sql92._compile.cache_clear()
        with Stopwatch() as watch:
            for expression in expressions[: sql92.CACHE_SIZE]:
                compile_sql92(expression)
        uncached.append(min(plan.compiles, sql92.CACHE_SIZE) / watch.seconds)
        with Stopwatch() as watch:
            for expression in expressions[: sql92.CACHE_SIZE]:
                compile_sql92(expression)
        cached.append(min(plan.compiles, sql92.CACHE_SIZE) / watch.seconds)
    first = Result("compile an expression (parse + build)", "compiles/s", uncached, alias="parse")
    again = Result("the same expression again (from the cache)", "compiles/s", cached).against(first)
    return [first, again]


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.arguments("filter", __doc__ or "", "2 repeats of 40,000 messages", raw=True)
    args, plan, _ = harness.parse(parser, argv, FULL, QUICK)
    started = time.perf_counter()
    samples: dict[str, list[float]] = {name: [] for name, _ in ROWS}
    matched: dict[str, int] = {}
    with harness.scratch_dir("filter-", harness.scratch_parent()) as root:
        store = MessageStore(StoreConfig(Path(root) / "store")).open()
        try:
            fill(store, plan.messages)
            for _ in range(plan.repeats):
                for name, make in ROWS:
                    seconds, matched[name] = scan(store, make())
                    samples[name].append(plan.messages / seconds)
        finally:
            store.close()
    baseline = Result(ROWS[0][0], "msgs/s", samples[ROWS[0][0]], alias="unfiltered")
    results = [baseline]
    for name, _ in ROWS[1:]:
        note = f"{matched[name]:,} of {plan.messages:,} match"
        results.append(Result(name, "msgs/s", samples[name], note=note).against(baseline))
    harness.print_table(results, f"scan one queue of {plan.messages:,} messages, {READ} per read")
    compiles = compile_rates(plan)
    harness.print_table(compiles, "compiling")
    harness.report("filter", args.json, argv, results + compiles, asdict(plan), started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
