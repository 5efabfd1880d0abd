"""Consumer group membership on this broker: who is in a group, what each member reads, and the
group's generation (RocketMQ's ConsumerManager and rebalance, done by the broker for HTTP clients).

A member joins and stays by heartbeat; one silent for ``expiry_s`` is dropped the next time the
group is looked at, and one that leaves is dropped at once. A clustering group's queues are
allocated over its members (app.broker.allocate), per subscribed topic, over the topic's read
queues; a broadcasting group gives every member every queue. Any change of the members, of their
subscriptions or of a topic's read queues allocates again and bumps the group's generation, which
fences commits: a member commits only queues it owns in the current generation.

Generations only grow, across restarts too: they start from the clock in milliseconds when the
broker starts, so a member that heartbeat before a restart cannot commit with its old generation.

Membership is per broker (RocketMQ's way): a member heartbeats to every broker that hosts its
topics, and each broker allocates its own queues. Membership is held in memory; after a restart
members come back with their next heartbeat, and the offsets they committed were persisted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

from app.broker.allocate import STRATEGIES, allocate
from app.broker.errors import GroupConflictError, GroupFullError, MemberNotFoundError
from app.broker.filters import FilterExpression

CLUSTERING = "clustering"
BROADCASTING = "broadcasting"
MODELS = (CLUSTERING, BROADCASTING)
# RocketMQ's two listener kinds: an orderly member consumes each of its queues in order, holding
# the queue's lock (app.broker.queue_locks).
CONCURRENTLY = "concurrently"
ORDERLY = "orderly"

Assignment = dict[str, list[int]]  # topic -> queue ids


@dataclasses.dataclass
class Member:
    client_id: str
    subscriptions: dict[str, FilterExpression]  # topic -> tag or SQL92 expression
    model: str = CLUSTERING
    strategy: str = "averagely"
    consume_from: str = "last"  # last, first, or a timestamp in ms (as the pull's ``from``)
    consume_mode: str = CONCURRENTLY
    last_heartbeat: float = 0.0
    assignment: Assignment = dataclasses.field(default_factory=dict)
    # A member in this process (a WebSocket subscriber): told its queues at every allocation, and
    # never expired (it leaves when its socket closes).
    listener: Callable[[Assignment], None] | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass
class Group:
    name: str
    generation: int
    members: dict[str, Member] = dataclasses.field(default_factory=dict)
    queue_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    # Set on every change of the generation: a group pull held on the old assignment ends early.
    watchers: set[asyncio.Event] = dataclasses.field(default_factory=set)

    @property
    def model(self) -> str | None:
        return next((member.model for member in self.members.values()), None)

    @property
    def strategy(self) -> str | None:
        return next((member.strategy for member in self.members.values()), None)

    @property
    def consume_mode(self) -> str | None:
        return next((member.consume_mode for member in self.members.values()), None)


class ConsumerGroups:
    """The groups of this broker. ``read_queues(topic)`` is the topic's read queue count (0 if the
    topic is gone); ``clock`` is monotonic seconds."""

    def __init__(
        self,
        read_queues: Callable[[str], int],
        expiry_s: float,
        clock: Callable[[], float] = time.monotonic,
        first_generation: int | None = None,
        max_members: int = 1000,
    ) -> None:
        self.read_queues = read_queues
        self.expiry_s = expiry_s
        self.max_members = max_members
        self.clock = clock
        self._next_generation = (
            first_generation if first_generation is not None else time.time_ns() // 1_000_000
        )
        self._groups: dict[str, Group] = {}
        self._last_sweep = clock()
        # Generations below this one read a log that was cut since (see log_cut): their commits
        # are refused in every consume mode.
        self.cut_generation = 0

    def _generation(self) -> int:
        self._next_generation += 1
        return self._next_generation

    def log_cut(self) -> None:
        """The log under the groups' queue offsets was cut (a former master, or a slave, cut back
        to follow its master), and other messages will be stored at the offsets cut: what a member
        read before is not what they now hold, and its commit would pass those messages. Every
        group moves to a new generation, and a commit from a generation before this one is refused
        whatever the group's consume mode (an ordered member's lock does not tell)."""
        self.cut_generation = self._generation()
        for group in self._groups.values():
            group.generation = self._generation()
            for watcher in group.watchers:
                watcher.set()

    def names(self) -> list[str]:
        return sorted(self._groups)

    def get(self, name: str) -> Group | None:
        group = self._groups.get(name)
        if group is not None:
            self.refresh(group)
        return group

    def heartbeat(self, name: str, member: Member) -> Group:
        """Add or renew ``member``; refused when the group's other members use another model or
        allocation strategy (they would allocate the queues differently), another consume mode
        (a concurrent member would ignore the ordered members' locks), or when a new member would
        pass ``max_members`` (members already in keep renewing)."""
        self._sweep_if_due()
        if member.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {member.strategy!r}")
        group = self._groups.get(name)
        if group is None:
            group = self._groups[name] = Group(name, self._generation())
        expired = self._expire(group)
        others = [other for other in group.members.values() if other.client_id != member.client_id]
        for other in others:
            if (other.model, other.strategy, other.consume_mode) != (
                member.model,
                member.strategy,
                member.consume_mode,
            ):
                raise GroupConflictError(
                    f"group {name!r} consumes with model={other.model!r} strategy={other.strategy!r} "
                    f"consume_mode={other.consume_mode!r}; {member.client_id!r} asked for "
                    f"model={member.model!r} strategy={member.strategy!r} consume_mode={member.consume_mode!r}"
                )
        if member.client_id not in group.members and len(group.members) >= self.max_members:
            raise GroupFullError(
                f"group {name!r} has {len(group.members)} members, the most WHARF_MAX_GROUP_MEMBERS allows"
            )
        member.last_heartbeat = self.clock()
        previous = group.members.get(member.client_id)
        if previous is not None:
            member.assignment = previous.assignment
        group.members[member.client_id] = member
        changed = (
            expired
            or previous is None
            or (previous.subscriptions, previous.consume_from)
            != (
                member.subscriptions,
                member.consume_from,
            )
        )
        self._settle(group, changed)
        return group

    def attach(
        self,
        name: str,
        client_id: str,
        topic: str,
        expression: FilterExpression,
        listener: Callable[[Assignment], None],
    ) -> Group:
        """Join a member of this process that is told its queues by ``listener`` (at once, and at
        every allocation) until it leaves; it takes the group's strategy, whatever it is."""
        existing = self._groups.get(name)
        strategy = (existing.strategy if existing is not None else None) or "averagely"
        member = Member(client_id, {topic: expression}, CLUSTERING, strategy, listener=listener)
        return self.heartbeat(name, member)

    def touch(self, name: str, client_id: str) -> tuple[Group, Member]:
        """The member, renewed (a group pull is a sign of life); MemberNotFoundError if it is not in
        the group (never joined, left or expired): it must heartbeat first."""
        group = self.get(name)
        member = group.members.get(client_id) if group is not None else None
        if group is None or member is None:
            raise MemberNotFoundError(
                f"client {client_id!r} is not a member of group {name!r}: send a heartbeat first"
            )
        member.last_heartbeat = self.clock()
        return group, member

    def leave(self, name: str, client_id: str) -> bool:
        group = self._groups.get(name)
        if group is None or group.members.pop(client_id, None) is None:
            return False
        self._settle(group, True)
        return True

    def refresh(self, group: Group) -> None:
        """Drop expired members and follow changes of the topics' read queues."""
        self._settle(group, self._expire(group))

    def topics_changed(self) -> None:
        for group in list(self._groups.values()):
            self.refresh(group)

    def _sweep_if_due(self) -> None:
        """Once per expiry period, drop the silent members of every group, so that a group nobody
        looks at again does not keep its departed members (and itself) in memory."""
        now = self.clock()
        if now - self._last_sweep < self.expiry_s:
            return
        self._last_sweep = now
        for group in list(self._groups.values()):
            self.refresh(group)

    def _expire(self, group: Group) -> bool:
        deadline = self.clock() - self.expiry_s
        expired = [
            cid
            for cid, member in group.members.items()
            if member.listener is None and member.last_heartbeat < deadline
        ]
        for client_id in expired:
            del group.members[client_id]
        return bool(expired)

    def _settle(self, group: Group, changed: bool) -> None:
        topics = sorted({topic for member in group.members.values() for topic in member.subscriptions})
        counts = {topic: self.read_queues(topic) for topic in topics}
        if not changed and counts == group.queue_counts:
            return
        group.queue_counts = counts
        for member in group.members.values():
            member.assignment = {}
        for topic, count in counts.items():
            subscribers = [cid for cid, member in group.members.items() if topic in member.subscriptions]
            queue_ids = list(range(count))
            if group.model == BROADCASTING:
                allocation = {cid: queue_ids for cid in subscribers}
            else:
                allocation = allocate(group.strategy or "averagely", topic, queue_ids, subscribers)
            for client_id, queues in allocation.items():
                if queues:
                    group.members[client_id].assignment[topic] = queues
        group.generation = self._generation()
        for watcher in group.watchers:
            watcher.set()
        # One synchronous pass: no other task runs between a queue's revocation from one member
        # of this process and its assignment to another, so the new owner reads the offset the
        # old one left.
        for member in list(group.members.values()):
            if member.listener is not None:
                member.listener(member.assignment)
        if not group.members:
            self._groups.pop(group.name, None)
