"""The HTTP benchmark's wrk sections: ``produce``, ``batch`` and ``pull`` (see bench/http.py)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping
from pathlib import Path

import orjson
from wharf_client.codec import BATCH_MEDIA_TYPE, RECORDS_MEDIA_TYPE, IncomingMessage, encode_batch

from bench.harness import Result, Target
from bench.http_load import (
    BARE_KINDS,
    BareServer,
    WrkRun,
    post_script,
    pull_script,
)
from bench.http_setup import (
    BATCH_MESSAGES,
    LARGE_BODY,
    PULL_BATCH,
    QUEUES,
    SMALL_BODY,
    Bench,
    text_body,
)

# Targets for this 2-core machine.
PRODUCE_SHARE_TARGET = 2.0  # single-message produce over the bare FastAPI route
BATCH_JSON_TARGET = 100_000  # msgs/s, 100 x 1 KiB per request
BATCH_BINARY_TARGET = 200_000
PULL_JSON_TARGET = 150_000  # msgs/s, 1000 per answer
PULL_BINARY_TARGET = 300_000


def rate_samples(runs: list[WrkRun], per_request: int = 1) -> list[float]:
    return [run.requests_per_s * per_request for run in runs]


def wrk_extra(runs: list[WrkRun]) -> dict[str, float]:
    def median(values: Iterator[float]) -> float:
        return round(statistics.median(values), 3)

    return {
        "latency_p50_ms": median(run.latency_ms.get("p50", float("nan")) for run in runs),
        "latency_p99_ms": median(run.latency_ms.get("p99", float("nan")) for run in runs),
        "server_cores": median(run.server_cores for run in runs),
        "server_cpu_us_per_request": median(run.cpu_us_per_request for run in runs),
        "mb_read_per_s": median(run.bytes_read / run.seconds / 1e6 for run in runs),
    }


def wrk_note(runs: list[WrkRun], per_request: int = 1) -> str:
    extra = wrk_extra(runs)
    cpu = extra["server_cpu_us_per_request"] / per_request
    unit = "request" if per_request == 1 else "message"
    return (
        f"server {extra['server_cores']:.2f} cores, {cpu:,.1f} us CPU/{unit}; "
        f"latency p50 {extra['latency_p50_ms']:.1f} ms, p99 {extra['latency_p99_ms']:.1f} ms"
    )


def message_rates(
    title: str,
    runs: dict[str, list[WrkRun]],
    per_request: int,
    targets: Mapping[str, float],
    notes: Mapping[str, str],
) -> list[Result]:
    """One figure per load (``targets``' keys): messages per second, ``per_request`` per request."""
    return [
        Result(
            f"{title}, {name}",
            "msgs/s",
            rate_samples(runs[name], per_request),
            target=Target(target),
            note=notes[name] + wrk_note(runs[name], per_request),
            extra=wrk_extra(runs[name]),
        )
        for name, target in targets.items()
    ]


def produce(bench: Bench) -> list[Result]:
    plan = bench.plan
    topic = "produce"
    bench.create_topic(topic)
    raw_body = text_body(SMALL_BODY, 1).encode()
    scripts = {
        "raw": post_script(
            bench.root / "produce-raw.lua", bench.file("raw.bin", raw_body), "application/octet-stream"
        ),
        "json": post_script(
            bench.root / "produce-json.lua",
            bench.file("single.json", orjson.dumps({"body": raw_body.decode()})),
            "application/json",
        ),
    }
    path = f"/v1/topics/{topic}/messages"
    floors = {kind: BareServer(bench.root / f"bare-{kind}.log", kind) for kind in BARE_KINDS}
    try:
        targets: dict[str, tuple[str, Path, int]] = {}
        for kind, server in floors.items():
            server.start()
            targets[kind] = (server.url + path, scripts["raw"], server.pid)
        targets["raw"] = (bench.broker.url + path, scripts["raw"], bench.pid)
        targets["json"] = (bench.broker.url + path, scripts["json"], bench.pid)
        runs = bench.loads("produce", targets, plan.connections)
    finally:
        for server in floors.values():
            server.stop()
    baseline = Result(
        "bare FastAPI route, 128 B POST",
        "req/s",
        rate_samples(runs["fastapi"]),
        note=wrk_note(runs["fastapi"]),
        extra=wrk_extra(runs["fastapi"]),
        alias="bare",
    )
    results = [baseline]
    bare_cpu = baseline.extra["server_cpu_us_per_request"]
    # The ceilings below the framework have no target: the same answer from a raw ASGI callable
    # under uvicorn, and from an httptools protocol with no ASGI cycle at all.
    produce_target = Target(PRODUCE_SHARE_TARGET, on_ratio=True)
    rows = (
        ("asgi", "floor: raw ASGI callable under uvicorn, 128 B POST", None),
        ("protocol", "floor: httptools protocol, no ASGI, 128 B POST", None),
        ("raw", "produce 1 msg/request, octet-stream", produce_target),
        ("json", "produce 1 msg/request, JSON", produce_target),
    )
    for name, label, target in rows:
        extra = wrk_extra(runs[name])
        # CPU per request is steadier than rates on a shared machine: the same ratio in CPU time.
        extra["cpu_ratio_vs_bare"] = round(bare_cpu / extra["server_cpu_us_per_request"], 3)
        results.append(
            Result(
                label,
                "req/s",
                rate_samples(runs[name]),
                target=target,
                note=f"{wrk_note(runs[name])}; CPU-time ratio to bare {extra['cpu_ratio_vs_bare']:.2f}x",
                extra=extra,
                alias=f"floor-{name}" if target is None else "",
            ).against(baseline)
        )
    return results


def batch(bench: Bench) -> list[Result]:
    plan = bench.plan
    topic = "batch"
    bench.create_topic(topic)
    bodies = [text_body(LARGE_BODY, seed) for seed in range(BATCH_MESSAGES)]
    json_body = orjson.dumps({"messages": [{"body": body} for body in bodies]})
    binary_body = encode_batch(IncomingMessage(body=body.encode()) for body in bodies)
    url = f"{bench.broker.url}/v1/topics/{topic}/messages"
    scripts = {
        "json": post_script(
            bench.root / "batch-json.lua", bench.file("batch.json", json_body), "application/json"
        ),
        "binary": post_script(
            bench.root / "batch-binary.lua", bench.file("batch.bin", binary_body), BATCH_MEDIA_TYPE
        ),
    }
    targets = {name: (url, script, bench.pid) for name, script in scripts.items()}
    runs = bench.loads("batch", targets, plan.batch_connections)
    sizes = {"json": len(json_body), "binary": len(binary_body)}
    notes = {
        name: f"{size:,} B requests, {plan.batch_connections} connections; " for name, size in sizes.items()
    }
    goals = {"json": BATCH_JSON_TARGET, "binary": BATCH_BINARY_TARGET}
    return message_rates(f"batch produce {BATCH_MESSAGES} x 1 KiB", runs, BATCH_MESSAGES, goals, notes)


def fill_pull_topic(bench: Bench, topic: str) -> None:
    bench.create_topic(topic)
    bodies = [text_body(LARGE_BODY, seed).encode() for seed in range(64)]
    per_request = 1000
    for queue_id in range(QUEUES):
        for start in range(0, bench.plan.pull_per_queue, per_request):
            batch = encode_batch(
                IncomingMessage(body=bodies[(start + i) % len(bodies)], queue_id=queue_id)
                for i in range(per_request)
            )
            bench.client.post(
                f"/v1/topics/{topic}/messages", content=batch, headers={"Content-Type": BATCH_MEDIA_TYPE}
            ).raise_for_status()
    # Every offset the load asks for holds a whole answer: check the last one of each queue.
    last = bench.plan.pull_per_queue - PULL_BATCH
    for queue_id in range(QUEUES):
        answer = bench.client.get(
            f"/v1/topics/{topic}/queues/{queue_id}/messages",
            params={"offset": last, "max_messages": PULL_BATCH},
            headers={"Accept": RECORDS_MEDIA_TYPE},
        )
        answer.raise_for_status()
        count = int(answer.headers["X-Wharf-Message-Count"])
        if count != PULL_BATCH:
            raise RuntimeError(f"a pull of {PULL_BATCH} from queue {queue_id} answered {count} messages")


def pull(bench: Bench) -> list[Result]:
    plan = bench.plan
    topic = "pull"
    fill_pull_topic(bench, topic)
    slots = plan.pull_per_queue // PULL_BATCH
    url = bench.broker.url
    scripts = {
        "json": pull_script(
            bench.root / "pull-json.lua", topic, QUEUES, slots, PULL_BATCH, "application/json"
        ),
        "binary": pull_script(
            bench.root / "pull-binary.lua", topic, QUEUES, slots, PULL_BATCH, RECORDS_MEDIA_TYPE
        ),
    }
    targets = {name: (url, script, bench.pid) for name, script in scripts.items()}
    runs = bench.loads("pull", targets, plan.batch_connections)
    stored = QUEUES * plan.pull_per_queue
    note = f"{stored:,} stored 1 KiB messages in {QUEUES} queues, {plan.batch_connections} connections; "
    goals = {"json": PULL_JSON_TARGET, "binary": PULL_BINARY_TARGET}
    return message_rates(f"pull {PULL_BATCH}/request", runs, PULL_BATCH, goals, dict.fromkeys(goals, note))
