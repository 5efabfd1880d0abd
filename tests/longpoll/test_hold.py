"""The pull hold service as a specification: who wakes, who does not, and when."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.longpoll.hold import HeldPull, HoldOutcome, PullHoldService, WakeEvent
from app.store.record_format import tags_hash

TAG_A = tags_hash("TagA")
TAG_B = tags_hash("TagB")


class Offsets:
    def __init__(self) -> None:
        self.max = {}

    def __call__(self, topic: str, queue_id: int) -> int:
        return self.max.get((topic, queue_id), 0)


def run(coro):
    return asyncio.run(coro)


def test_arrival_answers_a_held_pull() -> None:
    async def scenario() -> HoldOutcome:
        offsets = Offsets()
        service = PullHoldService(offsets, check_interval_s=3600)
        await service.start()
        waiting = asyncio.create_task(service.hold("t", 0, 5, None, 10))
        await asyncio.sleep(0)
        assert service.held_count == 1
        offsets.max[("t", 0)] = 6
        service.notify_arrival("t", 0, 6, TAG_A)
        outcome = await asyncio.wait_for(waiting, 1)
        assert service.held_count == 0
        await service.stop()
        return outcome

    assert run(scenario()) is HoldOutcome.ARRIVED


def test_non_matching_tag_does_not_wake_and_matching_does() -> None:
    async def scenario() -> None:
        service = PullHoldService(Offsets(), check_interval_s=3600)
        await service.start()
        waiting = asyncio.create_task(service.hold("t", 0, 0, frozenset({TAG_A}), 10))
        await asyncio.sleep(0)
        service.notify_arrival("t", 0, 1, TAG_B)
        await asyncio.sleep(0.01)
        assert not waiting.done()
        service.notify_arrival("t", 1, 2, TAG_A)  # another queue
        service.notify_arrival("u", 0, 2, TAG_A)  # another topic
        await asyncio.sleep(0.01)
        assert not waiting.done()
        service.notify_arrival("t", 0, 2, TAG_A)
        assert await asyncio.wait_for(waiting, 1) is HoldOutcome.ARRIVED
        await service.stop()

    run(scenario())


def test_an_arrival_at_or_below_the_offset_does_not_wake() -> None:
    async def scenario() -> None:
        service = PullHoldService(Offsets(), check_interval_s=3600)
        await service.start()
        waiting = asyncio.create_task(service.hold("t", 0, 3, None, 10))
        await asyncio.sleep(0)
        service.notify_arrival("t", 0, 3, 0)  # next offset 3 means the message at offset 2
        await asyncio.sleep(0.01)
        assert not waiting.done()
        await service.stop()
        assert await waiting is HoldOutcome.SHUTDOWN

    run(scenario())


def test_deadline_answers_timeout() -> None:
    async def scenario() -> None:
        service = PullHoldService(Offsets(), check_interval_s=3600)
        await service.start()
        assert await service.hold("t", 0, 0, None, 0.05) is HoldOutcome.TIMEOUT
        assert service.held_count == 0
        await service.stop()

    run(scenario())


def test_arrival_from_another_thread_reaches_the_loop() -> None:
    async def scenario() -> None:
        service = PullHoldService(Offsets(), check_interval_s=3600)
        await service.start()
        waiting = asyncio.create_task(service.hold("t", 0, 0, None, 10))
        await asyncio.sleep(0)
        thread = threading.Thread(target=service.notify_arrival, args=("t", 0, 1, 0))
        thread.start()
        thread.join()
        assert await asyncio.wait_for(waiting, 1) is HoldOutcome.ARRIVED
        await service.stop()

    run(scenario())


def test_a_message_stored_before_registration_still_wakes() -> None:
    """The read said "nothing new", then a message landed before the pull was registered."""

    async def scenario() -> None:
        offsets = Offsets()
        offsets.max[("t", 0)] = 1
        service = PullHoldService(offsets, check_interval_s=3600)
        await service.start()
        assert await asyncio.wait_for(service.hold("t", 0, 0, None, 10), 1) is HoldOutcome.ARRIVED
        await service.stop()

    run(scenario())


def test_periodic_check_answers_pulls_whose_queue_moved() -> None:
    async def scenario() -> None:
        offsets = Offsets()
        service = PullHoldService(offsets, check_interval_s=3600)
        await service.start()
        moved = asyncio.create_task(service.hold("t", 0, 0, None, 10))
        still = asyncio.create_task(service.hold("t", 1, 0, None, 10))
        await asyncio.sleep(0)
        offsets.max[("t", 0)] = 1  # stored, but the arrival notice was lost
        assert service.check_all() == 1
        assert await asyncio.wait_for(moved, 1) is HoldOutcome.ARRIVED
        assert not still.done()
        await service.stop()
        assert await still is HoldOutcome.SHUTDOWN

    run(scenario())


def test_disconnect_answers_at_once() -> None:
    async def scenario() -> None:
        service = PullHoldService(Offsets(), check_interval_s=3600)
        await service.start()
        gone = asyncio.Event()

        async def receive() -> dict:
            await gone.wait()
            return {"type": "http.disconnect"}

        waiting = asyncio.create_task(service.hold("t", 0, 0, None, 10, receive))
        await asyncio.sleep(0)
        gone.set()
        assert await asyncio.wait_for(waiting, 1) is HoldOutcome.DISCONNECTED
        assert service.held_count == 0
        await service.stop()

    run(scenario())


def test_shutdown_answers_everyone_and_refuses_new_holds() -> None:
    async def scenario() -> None:
        service = PullHoldService(Offsets(), check_interval_s=3600)
        await service.start()
        pulls = [asyncio.create_task(service.hold("t", q, 0, None, 10)) for q in range(5)]
        await asyncio.sleep(0)
        await service.stop()
        assert [await p for p in pulls] == [HoldOutcome.SHUTDOWN] * 5
        assert await service.hold("t", 0, 0, None, 10) is HoldOutcome.SHUTDOWN

    run(scenario())


@pytest.mark.parametrize("second", list(HoldOutcome))
def test_a_held_pull_is_answered_once(second: HoldOutcome) -> None:
    async def scenario() -> None:
        held = HeldPull(("t", 0), 0, None, asyncio.get_running_loop().create_future())
        assert held.answer(HoldOutcome.TIMEOUT) is True
        assert held.answer(second) is False
        assert held.future.result() is HoldOutcome.TIMEOUT

    run(scenario())


def test_the_holders_own_wake_event_answers_woken_and_unregisters() -> None:
    async def scenario() -> HoldOutcome:
        service = PullHoldService(Offsets(), check_interval_s=3600)
        await service.start()
        wake = WakeEvent()
        waiting = asyncio.create_task(service.hold("t", 0, 5, None, 10, None, wake))
        await asyncio.sleep(0)
        assert service.held_count == 1
        wake.set()
        outcome = await asyncio.wait_for(waiting, 1)
        assert service.held_count == 0
        await service.stop()
        return outcome

    assert run(scenario()) is HoldOutcome.WOKEN


def test_a_wake_event_answers_its_holds_as_it_is_set_with_no_task_watching_it() -> None:
    async def scenario() -> None:
        service = PullHoldService(Offsets(), check_interval_s=3600)
        await service.start()
        wake = WakeEvent()
        tasks_before = len(asyncio.all_tasks())
        waiting = asyncio.create_task(service.hold("t", 0, 5, None, 10, None, wake))
        await asyncio.sleep(0)
        # The hold's own task and nothing else: no task per hold waits on the event.
        assert len(asyncio.all_tasks()) == tasks_before + 1
        assert len(wake.holds) == 1
        wake.set()
        (held,) = service._held[("t", 0)]
        assert held.answered  # answered by set() itself, not in a later turn
        assert await asyncio.wait_for(waiting, 1) is HoldOutcome.WOKEN
        assert not wake.holds
        await service.stop()

    run(scenario())


def test_a_hold_on_a_wake_event_set_already_is_answered_woken_at_once() -> None:
    async def scenario() -> None:
        service = PullHoldService(Offsets(), check_interval_s=3600)
        await service.start()
        wake = WakeEvent()
        wake.set()
        outcome = await asyncio.wait_for(service.hold("t", 0, 5, None, 10, None, wake), 1)
        assert outcome is HoldOutcome.WOKEN
        assert service.held_count == 0 and not wake.holds
        await service.stop()

    run(scenario())
