"""The produce-rate sampler: rates over the window from samples taken when asked, bounded memory."""

from __future__ import annotations

from app.broker.queue_rates import QueueRates


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_first_look_has_no_rate_and_the_next_one_counts_since_it() -> None:
    clock = Clock()
    rates = QueueRates(window_s=60, clock=clock)
    assert rates.sample("orders", [10, 0]) == ([None, None], 0.0)
    clock.now += 10
    assert rates.sample("orders", [60, 5]) == ([5.0, 0.5], 10.0)
    clock.now += 10
    # Still from the first sample: the window is 60 s.
    assert rates.sample("orders", [60, 5]) == ([2.5, 0.25], 20.0)


def test_samples_older_than_the_window_are_dropped() -> None:
    clock = Clock()
    rates = QueueRates(window_s=60, clock=clock)
    rates.sample("orders", [0])
    clock.now += 30
    rates.sample("orders", [300])
    clock.now += 40  # the first is 70 s old now: the rate runs from the second
    assert rates.sample("orders", [700]) == ([10.0], 40.0)


def test_a_queue_added_since_and_offsets_that_went_back() -> None:
    clock = Clock()
    rates = QueueRates(clock=clock)
    rates.sample("orders", [50])
    clock.now += 5
    # A second queue has no earlier offset; a queue whose offsets went back (a topic deleted and
    # made again) counts no negative rate.
    assert rates.sample("orders", [0, 20]) == ([0.0, None], 5.0)


def test_memory_is_bounded_by_topics_and_samples() -> None:
    clock = Clock()
    rates = QueueRates(window_s=60, max_topics=2, max_samples=6, clock=clock)
    for _ in range(100):
        clock.now += 1
        rates.sample("a", [1])
    assert len(rates._samples["a"]) <= 7  # one every 10 s over 60 s
    rates.sample("b", [1])
    rates.sample("c", [1])
    assert list(rates._samples) == ["b", "c"]  # "a", the least recently asked, went
    rates.forget("b")
    assert list(rates._samples) == ["c"]
