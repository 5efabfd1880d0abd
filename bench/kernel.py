"""Kernel benchmark: each compiled kernel function against its pure-Python twin, in one process.

Run from the repository root::

    .venv/bin/python -m bench.kernel [--quick] [--json out.json]

The twin is the baseline, measured in the same repeats, so each ratio is the compiled function's
speed-up on this machine now. Per function, on messages like the HTTP benchmark's (1 KiB text
bodies with a unique id, a tag and two keys; and 128 B bodies):

* ``encode_record``: a message into its CommitLog record (header, CRC32, properties, tag code).
* ``messages_json``: 1,000 stored records into the pull API's JSON array.
* ``check_record``: recovery's check of one stored record at its offset.
* ``record_is``: a read's check that it is the record its ConsumeQueue entry names.
* ``decode_records``: a client's decoding of binary pull answers of 100 records into messages.

Figures are operations (messages) per second, the median of the repeats. Without the extension
(not built, or ``WHARF_KERNEL=python``) the benchmark says so and stops.
"""

from __future__ import annotations

import struct
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

from app import codec
from app.store import kernel, record, record_format
from app.store.record_format import Limits, Message
from bench import harness
from bench.harness import Result, Stopwatch

HOST = record_format.encode_host("127.0.0.1", 8080)
LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    messages: int


FULL = Plan(repeats=5, messages=20_000)
QUICK = replace(FULL, repeats=2, messages=3_000)


def text_body(size: int, seed: int) -> bytes:
    words = ("wharf", "queue", "offset", "commit", "broker", "message", "pull", "store")
    text = " ".join(words[(seed * 7 + i) % len(words)] for i in range(size))
    return text.encode()[:size]


def messages(count: int, size: int) -> list[Message]:
    return [
        Message(
            "kernel-bench",
            text_body(size, i),
            i % 4,
            {"TAGS": f"t{i % 16}", "KEYS": f"order-{i} user-{i % 97}", "UNIQ_KEY": f"{i:032X}"},
        )
        for i in range(count)
    ]


def stored(batch: list[Message]) -> list[bytes]:
    """The records as the CommitLog holds them: offsets and store time patched in."""
    records, position = [], 0
    for number, message in enumerate(batch):
        data = bytearray(record_format.python_encode_record(message, HOST, 1, LIMITS).data)
        struct.pack_into(">qq", data, 20, number, position)
        struct.pack_into(">q", data, 56, 2)
        records.append(bytes(data))
        position += len(data)
    return records


def rate(count: int, run: Callable[[], object]) -> float:
    with Stopwatch() as watch:
        run()
    return count / watch.seconds


def rows(plan: Plan, size: int) -> list[Result]:
    batch = messages(plan.messages, size)
    records = stored(batch)
    log = b"".join(records)
    starts = [0]
    for data in records[:-1]:
        starts.append(starts[-1] + len(data))
    views = [memoryview(data) for data in records]
    reads = [
        (view, b"kernel-bench", i % 4, i, start)
        for i, (view, start) in enumerate(zip(views, starts, strict=True))
    ]
    pulls = [views[start : start + 1000] for start in range(0, len(views), 1000)]
    answers = [b"".join(records[start : start + 100]) for start in range(0, len(records), 100)]

    def encode(encoder: Callable[..., object]) -> Callable[[], object]:
        return lambda: [encoder(message, HOST, 1, LIMITS) for message in batch]

    def check(checker: Callable[..., object]) -> Callable[[], object]:
        return lambda: [checker(log, start, start) for start in starts]

    def identify(same: Callable[..., bool]) -> Callable[[], object]:
        return lambda: [same(*read) for read in reads]

    def encode_json(encoder: Callable[..., bytes]) -> Callable[[], object]:
        return lambda: [encoder(pull) for pull in pulls]

    def decode(decoder: Callable[..., object]) -> Callable[[], object]:
        return lambda: [decoder(answer) for answer in answers]

    pairs = [
        ("encode_record", encode(record_format.python_encode_record), encode(record_format.encode_record)),
        ("messages_json", encode_json(codec.python_messages_json), encode_json(codec.messages_json)),
        ("check_record", check(record.python_check_record), check(record.check_record)),
        ("record_is", identify(record.python_record_is), identify(record.record_is)),
        ("decode_records", decode(codec.python_decode_records), decode(codec.decode_records)),
    ]
    samples: dict[str, list[float]] = {f"{name} {kind}": [] for name, _, _ in pairs for kind in ("py", "c")}
    for _ in range(plan.repeats):
        for name, twin, compiled in pairs:
            samples[f"{name} py"].append(rate(plan.messages, twin))
            samples[f"{name} c"].append(rate(plan.messages, compiled))
    results = []
    for name, _, _ in pairs:
        baseline = Result(
            f"{name}, Python twin ({size} B)", "msgs/s", samples[f"{name} py"], alias=f"{name} twin"
        )
        results.append(baseline)
        results.append(
            Result(f"{name}, compiled ({size} B)", "msgs/s", samples[f"{name} c"]).against(baseline)
        )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.arguments("kernel", __doc__ or "", "2 repeats of 3,000 messages", raw=True)
    args, plan, _ = harness.parse(parser, argv, FULL, QUICK)
    if kernel.compiled is None:
        print("the compiled kernel is not loaded (not built, or WHARF_KERNEL=python): nothing to compare")
        return 1
    started = time.perf_counter()
    results = []
    for size in (1024, 128):
        found = rows(plan, size)
        harness.print_table(found, f"kernel functions, {plan.messages:,} messages of {size} B")
        results += found
    harness.report("kernel", args.json, argv, results, asdict(plan), started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
