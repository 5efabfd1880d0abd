"""Every push subscription of the broker: kept by :class:`app.push.registry.PushRegistry`, each run
by a :class:`app.push.pusher.Pusher` on the event loop, started with the broker and stopped before
it. A change (PUT) replaces the subscription's pusher: what the old one had in flight is cancelled,
not committed, and delivered again by the new one.

A new subscription starts at the end of its topic's queues: it is delivered what is produced from
then on (its offsets are committed at creation, so a restart resumes there).

A slave copies its master's subscriptions, secrets included, with the rest of the master's
metadata (app.broker.ha_metadata, under ``push_subscriptions``): its pushers wait, and a slave
promoted pushes what its master did, signed as before, from the offsets it copied too.

A cut of the broker's log (a former master steps down and follows the new one) voids what the
pushers read: each cancels its queues' loops and deliveries in flight without committing them and
drops its cursors (:meth:`app.push.pusher.Pusher.log_cut`), so that it reads from the committed
offsets, which the cut lowered, when the broker is promoted again.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from typing import TYPE_CHECKING, Any

from app.broker.errors import BrokerError, GroupConflictError, TooManyPushSubscriptionsError
from app.push.endpoint import EndpointGuard, check_endpoint
from app.push.pusher import Backoff, Pusher, message_filter
from app.push.registry import PushRegistry
from app.push.request import PushTransport
from app.push.subscription import PushSubscription, from_stored, parse_subscription, to_stored

if TYPE_CHECKING:
    from app.broker.core import Broker

log = logging.getLogger(__name__)

METADATA_KEY = "push_subscriptions"  # the subscriptions' key in a master's metadata for its slaves


class OffsetPersister:
    """Forces the committed offsets to disk for many waiters at once: a caller returns once a
    write that began after its call has ended (a group commit of the offsets)."""

    def __init__(self, broker: Broker) -> None:
        self._offsets = broker.store.consumer_offsets
        self._lock = asyncio.Lock()
        self._asked = 0
        self._written = 0

    async def __call__(self) -> None:
        self._asked += 1
        mine = self._asked
        async with self._lock:
            if self._written >= mine:
                return
            covered = self._asked
            await asyncio.to_thread(self._offsets.persist, True)
            self._written = covered


class PushService:
    def __init__(self, broker: Broker, transport: PushTransport) -> None:
        settings = broker.settings
        self.broker = broker
        self.transport = transport
        self.allow_private = settings.push_allow_private
        self.max_subscriptions = settings.push_max_subscriptions
        self.backoff = Backoff(
            settings.push_backoff_min_ms,
            max(settings.push_backoff_min_ms, settings.push_backoff_max_ms),
            settings.push_retry_after_max_s,
            settings.orderly_suspend_ms,
        )
        self.registry = PushRegistry(broker.store.config.config_dir)
        self.persist_offsets = OffsetPersister(broker)
        self.pushers: dict[str, Pusher] = {}
        self._changes = asyncio.Lock()
        self._started = False
        broker.metadata_parts[METADATA_KEY] = self
        self._stop_listening = broker.on_log_cut(self._log_cut)

    async def start(self) -> None:
        async with self._changes:
            self._started = True
            for subscription in self.registry.all():
                try:
                    await self._run(subscription)
                except BrokerError as error:  # its topic was deleted, say: GET shows it stopped
                    log.warning("push subscription %s does not start: %s", subscription.group, error)

    async def stop(self) -> None:
        self._started = False
        self._stop_listening()
        pushers, self.pushers = list(self.pushers.values()), {}
        await asyncio.gather(*(pusher.stop() for pusher in pushers))
        await self.transport.aclose()

    def _log_cut(self) -> None:
        """On the event loop, before the slave copies anything past the cut: no pusher commits
        what it read before it."""
        for pusher in self.pushers.values():
            pusher.log_cut()

    async def _run(self, subscription: PushSubscription) -> None:
        guard = EndpointGuard(subscription.url, self.allow_private)
        pusher = Pusher(self.broker, subscription, self.transport, self.persist_offsets, self.backoff, guard)
        self.pushers[subscription.group] = pusher
        await pusher.start()

    # -- the operations ----------------------------------------------------------------------------

    async def put(self, group: str, fields: dict[str, Any]) -> tuple[PushSubscription, bool, bool]:
        """Create or change the group's subscription: (it, created, its secret was made here)."""
        self.broker.refuse_on_slave("a push subscription")
        async with self._changes:
            existing = self.registry.get(group)
            subscription, made_secret = parse_subscription(
                group, fields, existing.secret if existing else None
            )
            config = await self.broker.topic(subscription.topic)
            members = self.broker.groups.get(group)
            if members is not None and members.members:
                raise GroupConflictError(
                    f"group {group!r} has members consuming it: a push subscription is a group of its own"
                )
            message_filter(subscription)  # a SQL92 expression that does not parse is refused here
            await check_endpoint(subscription.url, self.allow_private)
            if existing is None and len(self.registry) >= self.max_subscriptions:
                raise TooManyPushSubscriptionsError(
                    f"this broker runs {len(self.registry)} push subscriptions, as many as it takes "
                    "(WHARF_PUSH_MAX_SUBSCRIPTIONS)"
                )
            if existing is None or existing.topic != subscription.topic:
                self._start_at_end(group, subscription.topic, config.read_queue_nums)
            self.broker.group_configs.set(group, max_reconsume_times=subscription.max_reconsume_times)
            await self.persist_offsets()
            await asyncio.to_thread(self.registry.put, subscription)
            self.broker.metadata.bump()  # slaves copy it now
            old = self.pushers.pop(group, None)
            if old is not None:
                await old.stop()
            await self._run(subscription)
            return subscription, existing is None, made_secret

    def _start_at_end(self, group: str, topic: str, queues: int) -> None:
        store = self.broker.store
        offsets = store.consumer_offsets
        for queue_id in range(queues):
            if offsets.query(group, topic, queue_id) < 0:
                offsets.commit(group, topic, queue_id, store.max_offset(topic, queue_id))

    def describe(self, group: str) -> dict[str, Any] | None:
        subscription = self.registry.get(group)
        if subscription is None:
            return None
        pusher = self.pushers.get(group)
        fields = subscription.as_json()
        if pusher is None:
            fields["state"] = {"running": False}
        else:
            fields["state"] = {
                "running": not subscription.paused,
                "lag": pusher.lag(),
                "held_messages": pusher.held_messages(),
                **pusher.state.as_json(),
            }
        return fields

    def list(self) -> list[dict[str, Any]]:
        return [fields for s in self.registry.all() if (fields := self.describe(s.group)) is not None]

    async def delete(self, group: str) -> bool:
        """Stop and forget the group's subscription (its offsets stay, as a group's do)."""
        async with self._changes:
            pusher = self.pushers.pop(group, None)
            if pusher is not None:
                await pusher.stop()
            deleted = await asyncio.to_thread(self.registry.delete, group)
            if deleted:
                self.broker.metadata.bump()
            return deleted

    # -- a slave's copy ----------------------------------------------------------------------------

    def metadata(self) -> builtins.list[dict[str, Any]]:
        """Every subscription as the registry keeps it, secret included: what a slave copies."""
        return [to_stored(subscription) for subscription in self.registry.all()]

    async def follow_metadata(self, found: builtins.list[dict[str, Any]]) -> None:
        """Make this broker's subscriptions its master's: each one new or changed is kept and its
        pusher (re)started (waiting while this broker is a slave), each one gone is stopped and
        forgotten."""
        wanted = {subscription.group: subscription for subscription in map(from_stored, found)}
        async with self._changes:
            changed = [s for group, s in wanted.items() if self.registry.get(group) != s]
            gone = [s.group for s in self.registry.all() if s.group not in wanted]
            if not changed and not gone:
                return
            await asyncio.to_thread(self.registry.replace_all, wanted)
            for subscription in changed:
                self.broker.group_configs.set(
                    subscription.group, max_reconsume_times=subscription.max_reconsume_times
                )
            if not self._started:
                return  # start() runs what the registry holds
            for group in [*gone, *(subscription.group for subscription in changed)]:
                if (old := self.pushers.pop(group, None)) is not None:
                    await old.stop()
            for subscription in changed:
                await self._run(subscription)
