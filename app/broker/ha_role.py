"""This broker's place in its broker name: the master, or a slave copying it, and in which epoch.

The route registry plays RocketMQ 5's controller (the ``ha_*`` calls of app.routing.registry):

* At start the registry's record names the master. A broker it does not name follows that one as a
  slave, whatever its configured role: a former master rejoins this way, and cuts whatever it had
  that the new master lacks (app.store.epochs) before it appends.
* A promotion (``POST /v1/admin/ha/promote``, or automatic) is a compare-and-set of the epoch: of
  two slaves racing, one wins. The new master records its epoch at its CommitLog's end. A manual
  one is refused while the master is alive (its lease moved within ``WHARF_HA_FAILOVER_S`` on the
  slave's clock; with no record naming it, the slave is connected to it) unless forced.
* The master renews a lease in the record every ``WHARF_HA_FAILOVER_S / 5`` and reports the
  CommitLog offset its SEND_OK answers covered. A master that finds a later epoch there steps
  down and follows the new master. Under ``WHARF_HA_AUTO_FAILOVER`` a master whose lease was not
  renewed for half of ``WHARF_HA_FAILOVER_S`` takes no produce, and a slave that saw the lease
  stand still for all of ``WHARF_HA_FAILOVER_S`` (its own clock: no clocks are compared) promotes
  itself if it holds the confirmed offset, never otherwise. So the old master stops writing
  before a new one can be elected: no two brokers of a name take writes in one epoch.
* Each slave reports how far its CommitLog goes, and of the slaves that hold the confirmed offset
  the one furthest ahead is promoted (RocketMQ 5's SyncStateSet): the others defer to it. Not
  forever: a report counts up a beat, and a slave whose beats stood still (again on the watching
  slave's clock) for a failover period, the longer of the two, is dead or stopped and is passed
  over; so is a slave that reports but was not promoted within two such periods of the master's
  silence (it stalls, or runs without automatic failover).

* Offsets are compared only between logs of the record's epoch. A slave whose log is of an earlier
  epoch (a former master that stepped down and has not followed the new one yet) is never
  promoted automatically: past where its epoch ended its log may hold what the new master never
  had. A promotion starts the new epoch's confirmed offset where the promoted log ends, so the
  next failover promotes only a slave that holds all of it.

Without a registry the configured role holds, and a promotion raises the local epoch.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Protocol

from app.broker.errors import MasterAliveError, MisdirectedError, PromotionError
from app.broker.ha_master import SEND_OK, AppendSignal, HaMaster
from app.broker.ha_reports import SlaveReports
from app.broker.ha_slave import HaSlave, cancel_tasks
from app.routing.errors import RegistryUnavailableError
from app.routing.registry import HaRecord

if TYPE_CHECKING:
    from app.broker.delay import DelayedDelivery
    from app.broker.ha_metadata import MetadataVersion
    from app.broker.outbound import Outbound
    from app.routing.service import RoutingService
    from app.settings import Settings
    from app.store import MessageStore

log = logging.getLogger(__name__)

SLAVE = "SLAVE"
MASTER_ROUTE_ID = 0


class Broker(Protocol):
    """What a change of role needs of the broker core."""

    settings: Settings
    store: MessageStore
    routing: RoutingService | None
    delays: DelayedDelivery
    metadata: MetadataVersion
    outbound: Outbound

    async def apply_master_metadata(self, answer: dict[str, Any]) -> None: ...

    async def offsets_ahead_of_master(self) -> list[dict[str, Any]]: ...

    def log_cut(self) -> None: ...


class HaRole:
    def __init__(self, broker: Broker, signal: AppendSignal) -> None:
        self.broker = broker
        self.settings = broker.settings
        self.store = broker.store
        self.signal = signal
        self.role: str = self.settings.broker_role
        self.record: HaRecord | None = None  # the registry's, as last read
        self.master: HaMaster | None = None
        self.slave: HaSlave | None = None
        self.confirmed_offset = 0  # the CommitLog offset this master's SEND_OK answers covered
        self._lease_until = math.inf  # monotonic: a master takes produce until then
        self._lease_seen: tuple[int, int, float] | None = None  # a slave's (epoch, lease, since)
        self._slave_since = time.monotonic()  # when this broker last became a slave
        self._refused_failover_at = -1  # the confirmed offset a failover was last refused for
        self._refused_epoch = -1  # the epoch a failover was last refused in, this log being older
        self.slave_reports = SlaveReports(self.settings.ha_failover_s)
        self._deferred_to: int | None = None  # the slave ahead of this one a failover was left to
        self._silence_found: float | None = None  # when this slave found the master silent
        self._switch = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        if self.role == SLAVE:
            self._make_slave()
        else:
            self._make_master()

    @property
    def url(self) -> str:
        return self.settings.resolved_advertised_url

    @property
    def is_slave(self) -> bool:
        return self.role == SLAVE

    @property
    def epoch(self) -> int:
        return self.store.epochs.last

    @property
    def interval_s(self) -> float:
        return self.settings.ha_failover_s / 5

    # -- life cycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Take the role the registry's record gives (or the configured one), then run it."""
        record = await self._registry("ha_record", self.settings.broker_name)
        if record is None and not self.is_slave:
            record = await self._registry(
                "ha_claim", self.settings.broker_name, self.settings.broker_id, self.url, self.role
            )
        if record is not None:
            self.record = record
            if record.master_id != self.settings.broker_id and not self.is_slave:
                log.warning(
                    "the route registry names %s the master of %s in epoch %d: following it as a slave",
                    record.master_url,
                    self.settings.broker_name,
                    record.epoch,
                )
                self.role = SLAVE
                self._make_slave()
            elif record.master_id == self.settings.broker_id and self.is_slave:
                self.role = record.master_role
                self._make_master()
            if not self.is_slave:
                await asyncio.to_thread(self._begin_epoch, record.epoch)
                await self._renew()
        await self._route_as_role()
        if not self.is_slave and self.broker.routing is not None:
            # Registered before the record named this address (a master back at another port).
            self.broker.routing.heartbeat_soon()
        if self.slave is not None:
            self.slave.start()
        else:
            await asyncio.to_thread(self.broker.delays.start)
        if self.broker.routing is not None:
            self._tasks = [asyncio.create_task(self._watch(), name="ha-watch")]

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks = []
        if self.slave is not None:
            await self.slave.stop()

    def _make_slave(self) -> None:
        settings = self.settings
        self.store.replica = True
        # Until this slave has watched the lease stand still, its master counts as alive.
        self._lease_seen = None
        self._slave_since = time.monotonic()
        self.master = None
        self.slave = HaSlave(
            self.store,
            self.find_master,
            settings.broker_id,
            self.url,
            self.broker.apply_master_metadata,
            settings.ha_metadata_interval_ms,
            (settings.ha_access_key, settings.ha_secret_key) if settings.ha_access_key else None,
            self.broker.offsets_ahead_of_master,
            self.broker.outbound,
            self.broker.log_cut,
        )

    def _make_master(self) -> None:
        self.store.replica = False
        self.slave = None
        self.master = HaMaster(self.store, self.signal, self.settings.ha_sync_timeout_ms)
        self._lease_until = math.inf if self.broker.routing is None else time.monotonic() + self._lease_s

    @property
    def _lease_s(self) -> float:
        return self.settings.ha_failover_s / 2

    def _begin_epoch(self, epoch: int) -> None:
        if self.store.epochs.last < epoch:
            self.store.epochs.begin(epoch, self.store.commitlog.max_offset)

    # -- the registry ----------------------------------------------------------------------------

    async def _registry(self, call: str, *args: Any) -> Any:
        """A registry call's answer; None without a registry or when it cannot be reached."""
        routing = self.broker.routing
        if routing is None:
            return None
        try:
            return await routing.call(getattr(routing.registry, call), *args)
        except RegistryUnavailableError as error:
            log.warning("replication: %s", error)
            return None

    async def find_master(self) -> str:
        """The master a slave follows: the registry's record, else WHARF_HA_MASTER_URL, else the
        registry's broker id 0 of this name."""
        record = await self._registry("ha_record", self.settings.broker_name)
        if record is not None:
            self.record = record
            if record.master_id != self.settings.broker_id:
                return str(record.master_url)
        if self.settings.ha_master_url:
            return self.settings.ha_master_url
        if self.broker.routing is None:
            return ""
        masters = await self.broker.routing.masters(broker_names=[self.settings.broker_name])
        return masters[0][1] if masters else ""

    async def _route_as_role(self) -> None:
        """Register in the route under id 0 as the master; as a slave under this broker's id, or the
        id the promoted broker left when this one's is 0 (a former master)."""
        routing = self.broker.routing
        if routing is None:
            return
        if not self.is_slave:
            route_id = MASTER_ROUTE_ID
        elif self.settings.broker_id > 0:
            route_id = self.settings.broker_id
        else:
            route_id = self.record.master_id if self.record is not None and self.record.master_id else 1
        await routing.reidentify(route_id)

    async def _renew(self) -> None:
        """A master renews its lease; a record that names another master fences it."""
        started = time.monotonic()
        record = await self._registry(
            "ha_renew",
            self.settings.broker_name,
            self.epoch,
            self.settings.broker_id,
            self.url,
            self.confirmed_offset,
        )
        if record is None:  # no record yet (the registry could not be reached at the start)
            record = await self._registry(
                "ha_claim", self.settings.broker_name, self.settings.broker_id, self.url, self.role
            )
            if record is None:
                return
        self.record = record
        if record.master_id == self.settings.broker_id and record.epoch == self.epoch:
            self._lease_until = started + self._lease_s
        elif record.master_id != self.settings.broker_id and record.epoch >= self.epoch:
            await self.step_down(record)

    async def check_fenced(self) -> None:
        """A master asks the registry now whether a later epoch fenced it."""
        if not self.is_slave:
            await self._renew()

    async def _watch(self) -> None:
        # A slave reports at once, not a period later: the other slaves compare with its report.
        delay = 0.0 if self.is_slave else self.interval_s
        while True:
            await asyncio.sleep(delay)
            delay = self.interval_s
            try:
                if self.is_slave:
                    await self._watch_master()
                else:
                    await self._renew()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replication: watching the route registry failed")

    async def _watch_master(self) -> None:
        reports = await self._registry(
            "ha_report",
            self.settings.broker_name,
            self.settings.broker_id,
            self.url,
            self.store.commitlog.max_offset,
            round(self.settings.ha_failover_s * 1000),
            self.epoch,
        )
        if reports is not None:
            self.slave_reports.update(reports)
        record = await self._registry("ha_record", self.settings.broker_name)
        if record is None:
            return
        self.record = record
        if record.master_id == self.settings.broker_id:
            return  # promoted, but not by this process: it takes the role at its next start
        now = time.monotonic()
        seen = self._lease_seen
        if seen is None or seen[:2] != (record.epoch, record.lease):
            self._lease_seen = (record.epoch, record.lease, now)
            self._deferred_to = self._silence_found = None
            if seen is not None and seen[0] != record.epoch and self.slave is not None:
                await self.slave.retarget()  # a new master: follow it now
            return
        if self.settings.ha_auto_failover and now - seen[2] >= self.settings.ha_failover_s:
            await self._fail_over(record, now - seen[2])

    async def _fail_over(self, record: HaRecord, silent_s: float) -> None:
        """The lease stood still for ``silent_s``: promote this slave if it holds the confirmed
        offset and no slave further ahead can be promoted instead."""
        held = self.store.commitlog.max_offset
        if self.epoch < record.epoch:
            # This log has not followed the master of the record's epoch yet (a former master that
            # stepped down, a slave that has not connected since the promotion): past where its
            # own epoch ended it may hold what that master never had, and it may lack what that
            # master confirmed, however far its offset goes.
            if self._refused_epoch != record.epoch:
                self._refused_epoch = record.epoch
                log.warning(
                    "the master %s of epoch %d has been silent for %.1f s, but this slave's log is of "
                    "epoch %d: it has not followed that master and is not promoted",
                    record.master_url,
                    record.epoch,
                    silent_s,
                    self.epoch,
                )
            return
        if held < record.confirmed_offset:
            if self._refused_failover_at != record.confirmed_offset:
                self._refused_failover_at = record.confirmed_offset
                log.warning(
                    "the master %s has been silent for %.1f s, but this slave holds the CommitLog to %d "
                    "and the master confirmed %d: it is not in sync and is not promoted",
                    record.master_url,
                    silent_s,
                    held,
                    record.confirmed_offset,
                )
            return
        reports = self.slave_reports
        if self._silence_found is None:
            self._silence_found = reports.clock()
        unheard = reports.unheard_since(self.settings.broker_id, record.master_id, self._silence_found)
        if unheard:
            # Their last reports may be older than the master's last SEND_OKs: wait for new ones.
            return
        passed_over = []
        ahead = reports.ahead_of(self.settings.broker_id, held, record.master_id, record.epoch)
        for broker_id in ahead:
            reason = reports.why_passed_over(broker_id, silent_s)
            if reason is None:
                # The slave furthest ahead holds every SEND_OK any of them holds: it is the one promoted.
                if self._deferred_to != broker_id:
                    self._deferred_to = broker_id
                    log.warning(
                        "the master %s has been silent for %.1f s; slave %d is further ahead and is promoted instead",
                        record.master_url,
                        silent_s,
                        broker_id,
                    )
                return
            passed_over.append(f"; {reason}")
        log.warning(
            "the master %s has been silent for %.1f s%s: promoting this slave",
            record.master_url,
            silent_s,
            "".join(passed_over),
        )
        try:
            await self.promote(record, automatic=True)
        except PromotionError as error:
            log.warning("not promoted: %s", error)

    # -- changes of role -------------------------------------------------------------------------

    def master_lease_left_s(self) -> float | None:
        """A slave under a route registry: how long its master's lease still counts as current, on
        this slave's clock (the lease must stand still for WHARF_HA_FAILOVER_S, as for an automatic
        failover; a slave that has not watched it yet counts from when it became a slave). None on
        a master, without a registry, or when the registry names no other master."""
        record = self.record
        if not self.is_slave or self.broker.routing is None or record is None:
            return None
        if record.master_id == self.settings.broker_id:
            return None
        seen = self._lease_seen
        since = seen[2] if seen is not None else self._slave_since
        return max(0.0, since + self.settings.ha_failover_s - time.monotonic())

    def master_alive(self) -> bool:
        """A slave's master holds its lease; when no registry record names it (no registry, or one
        the master does not share): the slave is connected to it."""
        if self.slave is None:
            return False
        left = self.master_lease_left_s()
        return self.slave.connected if left is None else left > 0

    def _refuse_while_master_alive(self) -> None:
        if not self.master_alive():
            return
        assert self.slave is not None
        left = self.master_lease_left_s()
        master = (self.record.master_url if self.record is not None else "") or self.slave.master_url
        if left is None:
            why, then = "this slave is connected to it", "stop it first"
        else:
            why = f"its lease in the route registry ends in {left:.1f} s unless it renews it"
            then = "stop it and wait for its lease to end"
        raise MasterAliveError(
            f"the master {master or '(not known yet)'} of {self.settings.broker_name} is alive: {why}; "
            f"{then}, or promote with force=true",
            master,
            None if left is None else math.ceil(left * 1000),
        )

    async def promote(
        self, expected: HaRecord | None = None, automatic: bool = False, force: bool = False
    ) -> dict[str, Any]:
        """Make this slave the master of its broker name in the next epoch; ``automatic`` (a
        failover): only while the master's lease still stands where ``expected`` saw it. A manual
        promotion is refused while the master is alive (:meth:`master_alive`) unless ``force``."""
        async with self._switch:
            if not self.is_slave:
                raise PromotionError(f"this broker is the master of {self.settings.broker_name} already")
            assert self.slave is not None
            if not automatic and not force:
                self._refuse_while_master_alive()
            await self.slave.stop()
            expected = expected or self.record
            role = (
                expected.master_role
                if expected is not None and expected.master_role != SLAVE
                else ("ASYNC_MASTER")
            )
            routing = self.broker.routing
            if routing is not None:
                current = expected.epoch if expected is not None else -1
                try:
                    record = await routing.call(
                        routing.registry.ha_promote,
                        self.settings.broker_name,
                        current,
                        self.settings.broker_id,
                        self.url,
                        role,
                        self.store.commitlog.max_offset,
                        expected.lease if automatic and expected is not None else None,
                    )
                except BaseException:
                    self.slave.start()  # the registry cannot be reached: stay a slave
                    raise
                if record is None:
                    self.slave.start()
                    raise PromotionError(
                        f"another broker of {self.settings.broker_name} was promoted after epoch {current}"
                        + (", or its master renewed its lease" if automatic else "")
                    )
                self.record = record
                epoch = record.epoch
            else:
                epoch = self.epoch + 1
            await asyncio.to_thread(self._begin_epoch, epoch)
            # Offsets copied from the old master may cover messages it never confirmed: this log
            # stores other messages at those queue offsets from now on.
            await asyncio.to_thread(self.store.consumer_offsets.clamp_to_queue_ends)
            # What this log holds is what the next promoted slave must hold: the registry's record
            # starts the epoch's confirmed offset there, and the renewals keep to it.
            self.confirmed_offset = max(self.confirmed_offset, self.store.commitlog.max_offset)
            self.role = role
            self._make_master()
            log.warning(
                "promoted: the master of %s in epoch %d from CommitLog offset %d",
                self.settings.broker_name,
                epoch,
                self.store.commitlog.max_offset,
            )
            await self._route_as_role()
            await asyncio.to_thread(self.broker.delays.start)
            self.broker.metadata.bump()
            return self.status()

    async def step_down(self, record: HaRecord) -> None:
        """Another broker is the master in a later epoch: stop taking writes and follow it."""
        async with self._switch:
            if self.is_slave:
                return
            log.warning(
                "fenced: %s is the master of %s in epoch %d; this broker follows it as a slave",
                record.master_url,
                self.settings.broker_name,
                record.epoch,
            )
            self.record = record
            master = self.master
            self.role = SLAVE
            self._make_slave()
            if master is not None:
                master.close()
            await asyncio.to_thread(self.broker.delays.stop)
            await self._route_as_role()
            assert self.slave is not None
            self.slave.start()

    # -- the write path --------------------------------------------------------------------------

    def check_writable(self, what: str) -> None:
        """MisdirectedError on a slave (naming its master), and on a master whose lease lapsed under
        automatic failover (a slave may be promoted any moment)."""
        if self.is_slave:
            raise self.slave_refusal(what)
        if self.settings.ha_auto_failover and time.monotonic() > self._lease_until:
            raise MisdirectedError(
                "this master could not renew its lease in the route registry: it takes no "
                f"{what} until it does, or until the slave promoted in its place does",
                [],
            )

    def slave_refusal(self, what: str) -> MisdirectedError:
        master = self.slave.master_url if self.slave is not None else ""
        master = master or self.settings.ha_master_url
        return MisdirectedError(
            f"this broker is a slave and takes no {what}; send to its master {master or '(not known yet)'}",
            [master] if master else [],
        )

    def confirms_at_once(self) -> bool:
        """Whether :meth:`confirm` answers without waiting: any role but a SYNC_MASTER's."""
        return self.master is None or self.role != "SYNC_MASTER"

    def confirm_now(self, end_offset: int) -> str | None:
        """:meth:`confirm` without waiting, when it would not wait (:meth:`confirms_at_once`):
        SEND_OK, with ``end_offset`` recorded as confirmed; None when a slave must confirm first."""
        if not self.confirms_at_once():
            return None
        if end_offset > self.confirmed_offset:
            self.confirmed_offset = end_offset
        return SEND_OK

    async def confirm(self, end_offset: int) -> str:
        """The status of a produce whose messages end at ``end_offset``: under SYNC_MASTER, SEND_OK
        once an in-sync slave holds them. The offset SEND_OK answers covered is reported to the
        registry, which promotes only a slave that holds it."""
        status = self.confirm_now(end_offset)
        if status is not None:
            return status
        assert self.master is not None
        status = await self.master.wait_for_slave(end_offset)
        if status == SEND_OK:
            self.confirmed_offset = max(self.confirmed_offset, end_offset)
        return status

    def suggest_broker_id(self, reads_disk: bool) -> int:
        """Where a consumer should read next (RocketMQ's whichBrokerWhenConsumeSlowly): one whose
        reads fall behind the page cache goes to an in-sync slave (a master suggests the lowest id
        connected) or stays on this slave; any other goes to the master, id 0."""
        if not reads_disk:
            return MASTER_ROUTE_ID
        if self.slave is not None:
            return self.settings.broker_id
        if self.master is not None:
            in_sync = [link.broker_id for link in self.master.slaves.values() if self.master.in_sync(link)]
            return min(in_sync, default=MASTER_ROUTE_ID)
        return MASTER_ROUTE_ID

    # -- status ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        settings = self.settings
        return {
            "role": self.role,
            "epoch": self.epoch,
            "broker_name": settings.broker_name,
            "broker_id": settings.broker_id,
            "master_url": self.slave.master_url if self.slave is not None else self.url,
            "commitlog_max_offset": self.store.commitlog.max_offset,
            "confirmed_offset": self.confirmed_offset,
            "connected": self.slave.connected if self.slave is not None else False,
            "slaves": self.master.describe_slaves() if self.master is not None else [],
            "master_alive": self.master_alive(),
            "master_lease_left_ms": None
            if (left := self.master_lease_left_s()) is None
            else math.ceil(left * 1000),
        }
