"""Hold benchmark: the CPU one held pull costs, from its hold to its answer by an arrival.

Run from the repository root::

    .venv/bin/python -m bench.hold [--quick] [--json out.json]

In process, on uvloop, no sockets: one reader holds a pull on a queue, an arrival notice wakes it,
the reader holds again, ``cycles`` times; the process's CPU time (``time.process_time``) per cycle,
so the machine's other load moves the figure less than it moves wall time. Rows, interleaved
repeat by repeat:

* a bare future created, set and awaited, with a task switch (the floor of any hold: the baseline);
* a hold of :class:`app.longpoll.hold.PullHoldService` answered by an arrival (an HTTP long poll's);
* the same with a :class:`~app.longpoll.hold.WakeEvent` beside it (a WebSocket subscriber's queue
  reader, a group's multi-queue pull, a pusher), which answers the holds waiting on it as it is set;
* the same with a task per hold waiting on an :class:`asyncio.Event`, created and cancelled around
  each hold: the way a hold watched its wake event before :class:`WakeEvent`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import uvloop

from app.longpoll.hold import HoldOutcome, PullHoldService, WakeEvent
from bench import harness
from bench.harness import Result


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    cycles: int


FULL = Plan(repeats=5, cycles=50_000)
QUICK = Plan(repeats=1, cycles=5_000)

Hold = Callable[[PullHoldService, int], Awaitable[HoldOutcome]]


async def _bare_cycles(cycles: int) -> float:
    """CPU microseconds per future created, set by another task and awaited."""
    loop = asyncio.get_running_loop()
    ready: list[asyncio.Future[None]] = []
    arrived = asyncio.Event()

    async def reader() -> None:
        for _ in range(cycles):
            future = loop.create_future()
            ready.append(future)
            arrived.set()
            await future

    task = asyncio.ensure_future(reader())
    started = time.process_time()
    for _ in range(cycles):
        await arrived.wait()
        arrived.clear()
        ready.pop().set_result(None)
        await asyncio.sleep(0)
    await task
    return (time.process_time() - started) / cycles * 1e6


async def _hold_cycles(cycles: int, hold: Hold) -> float:
    """CPU microseconds per hold answered by an arrival notice, ``hold`` making each hold."""
    stored = [0]
    service = PullHoldService(lambda topic, queue_id: stored[0], check_interval_s=3600)
    await service.start()

    async def reader() -> None:
        for offset in range(cycles):
            outcome = await hold(service, offset)
            assert outcome is HoldOutcome.ARRIVED, outcome

    task = asyncio.ensure_future(reader())
    await asyncio.sleep(0)
    started = time.process_time()
    for offset in range(cycles):
        stored[0] = offset + 1
        service.notify_arrival("t", 0, offset + 1, 0)
        await asyncio.sleep(0)  # the reader answers and holds again
        await asyncio.sleep(0)
    await task
    elapsed = time.process_time() - started
    await service.stop()
    return elapsed / cycles * 1e6


def _plain(service: PullHoldService, offset: int) -> Awaitable[HoldOutcome]:
    return service.hold("t", 0, offset, None, 30)


def _with_wake_event() -> Hold:
    wake = WakeEvent()
    return lambda service, offset: service.hold("t", 0, offset, None, 30, None, wake)


def _with_a_task_per_hold() -> Hold:
    wake = asyncio.Event()

    async def hold(service: PullHoldService, offset: int) -> HoldOutcome:
        watcher = asyncio.ensure_future(wake.wait())
        try:
            return await service.hold("t", 0, offset, None, 30)
        finally:
            watcher.cancel()

    return hold


def run(plan: Plan) -> list[Result]:
    async def rounds() -> dict[str, list[float]]:
        samples: dict[str, list[float]] = {"bare": [], "plain": [], "wake": [], "task": []}
        for _ in range(plan.repeats):
            samples["bare"].append(await _bare_cycles(plan.cycles))
            samples["plain"].append(await _hold_cycles(plan.cycles, _plain))
            samples["wake"].append(await _hold_cycles(plan.cycles, _with_wake_event()))
            samples["task"].append(await _hold_cycles(plan.cycles, _with_a_task_per_hold()))
        return samples

    samples = uvloop.run(rounds())
    bare = Result("a future set and awaited", "us CPU/cycle", samples["bare"], alias="bare future")
    earlier = Result(
        "hold with a task per hold on an asyncio.Event (earlier)",
        "us CPU/cycle",
        samples["task"],
        alias="a task per hold",
    ).against(bare)
    return [
        bare,
        Result("hold answered by an arrival", "us CPU/cycle", samples["plain"]).against(bare),
        earlier,
        Result("hold with a WakeEvent", "us CPU/cycle", samples["wake"]).against(earlier),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments("hold", __doc__ or "", "5,000 cycles, one repeat", raw=True)
    args, plan, _ = harness.parse(parser, argv, FULL, QUICK)
    started = time.perf_counter()
    results = run(plan)
    harness.print_table(results, f"hold + wake, {plan.cycles:,} cycles x {plan.repeats}")
    harness.report(
        "hold", args.json, argv, results, {"repeats": plan.repeats, "cycles": plan.cycles}, started
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
