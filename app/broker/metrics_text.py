"""The broker's wide families, written straight in Prometheus' text format (version 0.0.4).

A family with a series per topic, per (topic, group) or per (group, topic, queue) has tens of
thousands of series on a broker of 10,000 queues. Through prometheus_client's families a series
costs about 25 us (a Sample object, then escaping and formatting every label with its generic
code): about a second for 40,000 lag series. Written here, where the label values need escaping
only when they hold one of three characters, a series costs about 1 us (``python -m bench.metrics``).

::

    # HELP wharf_consumer_lag Messages of a queue after the group's committed offset
    # TYPE wharf_consumer_lag gauge
    wharf_consumer_lag{group="billing",topic="orders",queue="0"} 60
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.broker.metrics import BrokerMetrics
from app.store import MessageStore

Row = tuple[Sequence[str], int]  # label values in the family's order, value

_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


def escape(value: str) -> str:
    """A label value as the text format quotes it: backslash, double quote and line feed escaped."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.translate(_ESCAPES)
    return value


def family_text(name: str, kind: str, documentation: str, labels: Sequence[str], rows: Iterable[Row]) -> str:
    """One family: its HELP and TYPE lines, then a line per row."""
    heads = [f'{name}{{{label}="' for label in labels[:1]] + [f'",{label}="' for label in labels[1:]]
    lines = [f"# HELP {name} {documentation}\n# TYPE {name} {kind}\n"]
    for values, value in rows:
        parts = [head + escape(label_value) for head, label_value in zip(heads, values, strict=True)]
        lines.append(f'{"".join(parts)}"}} {value}\n')
    return "".join(lines)


def broker_series(metrics: BrokerMetrics, store: MessageStore | None) -> str:
    """The counters of every topic and (topic, group), and the lag of every committed queue when the
    store is open."""
    # list(): one step under the GIL, while the event loop may add a topic or a group.
    produced = list(metrics.produced_messages.items())
    produced_bytes = list(metrics.produced_bytes.items())
    consumed = list(metrics.consumed_messages.items())
    text = [
        family_text(
            "wharf_messages_produced_total",
            "counter",
            "Messages stored, by topic",
            ("topic",),
            (((topic,), count) for topic, count in produced),
        ),
        family_text(
            "wharf_bytes_produced_total",
            "counter",
            "Body bytes of the messages stored, by topic",
            ("topic",),
            (((topic,), count) for topic, count in produced_bytes),
        ),
        family_text(
            "wharf_messages_consumed_total",
            "counter",
            'Messages handed out by pulls and to WebSocket subscribers, by topic and group ("" without one)',
            ("topic", "group"),
            consumed,
        ),
    ]
    if store is not None:
        text.append(consumer_lag(store))
    return "".join(text)


def consumer_lag(store: MessageStore) -> str:
    """``wharf_consumer_lag``: every committed offset once, against its queue's offsets in memory -
    the max offset minus the committed offset raised to the min offset (as
    GET /v1/groups/{group}/offsets reads it). A queue's offsets are read once for all its groups."""
    offsets = store.consumer_offsets
    queues = store.queues.queues
    bounds_of_topic: dict[str, dict[int, tuple[int, int]]] = {}  # queue id -> (min, max offset)
    lines = [
        "# HELP wharf_consumer_lag Messages of a queue after the group's committed offset\n"
        "# TYPE wharf_consumer_lag gauge\n"
    ]
    append = lines.append  # the loop below runs once per series: tens of thousands of times
    for group, topics in offsets.group_topics().items():
        group_label = escape(group)
        for topic in topics:
            bounds = bounds_of_topic.setdefault(topic, {})
            head = f'wharf_consumer_lag{{group="{group_label}",topic="{escape(topic)}",queue="'
            for queue_id, committed in offsets.offsets(group, topic).items():
                known = bounds.get(queue_id)
                if known is None:
                    queue = queues.get((topic, queue_id))
                    known = bounds[queue_id] = (
                        (queue.min_offset, queue.max_offset) if queue is not None else (0, 0)
                    )
                low, high = known
                start = committed if committed > low else low
                append(f'{head}{queue_id}"}} {high - start if high > start else 0}\n')
    return "".join(lines)
