"""The ``static`` policy: the kubelet's static CPU manager, over NRI.

Theory of operation (kubelet semantics, pkg/kubelet/cm/cpumanager/policy_static.go):

- A container gets **exclusive** CPUs when its pod is Guaranteed and its CPU request is a
  positive whole number of CPUs.  The CPUs are picked by `common.take_cpus` (whole
  packages, then NUMA nodes, then cores, then threads, packed) from the *free* CPUs:
  online minus reserved minus those already held exclusively.  New exclusive allocations
  never take reserved CPUs.
- Every other container runs on the **shared pool**: online CPUs minus all exclusive
  ones.  As in the kubelet the shared pool *includes* the reserved CPUs (so it never runs
  dry while reserved CPUs exist); with the ``strict-cpu-reservation`` option it excludes
  them, and an exclusive allocation that would leave the shared pool empty fails.
- **Reserved** CPUs come from ``reservedSystemCPUs`` (an explicit set) or
  ``reservedResources.cpu`` (a quantity; ``ceil(quantity)`` CPUs from the lowest-numbered
  cores, threads of a core together).  Zero reserved CPUs are allowed (the kubelet
  refuses them); the shared pool is then protected only by the "never empty" rule.
- ``full-pcpus-only``: an exclusive request must be a multiple of the threads per core
  and is served by whole cores only; otherwise creation fails (kubelet's
  SMTAlignmentError) with a message naming the request and the free CPUs.
- Memory is not pinned (empty mems = untouched) unless ``pinMemory: true``; then mems are
  the DRAM nodes of the container's CPUs.

The state records, per container, the exclusive CPUs it holds (empty for shared ones).
Assignments are rendered from it; when the shared pool shrinks or grows, every shared
container's rendering changes and `decide.diff_updates` reports each as an update.  A
decision renders only what can change (`_render_changed`): the subject, plus every
shared container when the shared pool changed; a shared creation or release is thus
O(1) in the number of containers, and the union of exclusive CPUs (`StaticState.held`,
built with the state) is carried from state to state rather than collected from every
entry.

``rebuild`` keeps an exclusive container on its current CPUs when they are a valid grant
(the right count, online, not reserved, whole cores under ``full-pcpus-only``, leaving a
shared CPU).  Claims that no other valid claim overlaps are kept first; then conflicting
ones, smaller first, each only while disjoint from those kept (`common.order_claims`): so a
container reporting every CPU (the runtime failed open) loses to the valid grants it
covers, and of two reporting the same CPUs the first listed keeps them.  Others are
re-picked, preferring their current CPUs; a container that cannot get exclusive CPUs any
more falls back to the shared pool rather than failing the whole synchronization.  Every
container whose rendering differs from its report gets an update, so after a rebuild no
CPU exclusive to one container is in another's cpuset (the restart rule).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from immutables import Map
from pydantic import BaseModel, ConfigDict, Field

from nri_resmgr.model import (
    AllocationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
    PolicyState,
    QoSClass,
)
from nri_resmgr.policy.base import Policy, PolicyRecord
from nri_resmgr.policy.common import (
    lowest_cpus,
    order_claims,
    parse_cpu_amount,
    parse_cpu_list,
    take_cpus,
)
from nri_resmgr.policy.decide import (
    decide,
    decide_release,
    nothing_to_release,
)
from nri_resmgr.policy.kit.constraints import RESERVED_CPU, dram_near
from nri_resmgr.policy.kit.holders import Holders, hold, holders_of
from nri_resmgr.policy.kit.rebuild import each_once, moved
from nri_resmgr.policy.kit.records import Meaning, RecordError
from nri_resmgr.policy.pool_report import PoolCPUs
from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError, NodeSet, union
from nri_resmgr.topology.model import Topology
from nri_resmgr.validation import invalid, validate

__all__ = ["RECORD", "StaticConfig", "StaticPolicy", "StaticState"]


SUBJECT = "policy static"
SYSTEM_CPUS = "reservedSystemCPUs"


class StaticOptions(BaseModel):
    """kubelet ``cpuManagerPolicyOptions`` this policy implements."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    full_pcpus_only: bool = Field(default=False, alias="full-pcpus-only")
    strict_cpu_reservation: bool = Field(default=False, alias="strict-cpu-reservation")


class ReservedResources(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: str | int | float | None = None


class StaticConfig(BaseModel):
    """Configuration of the static policy (kubelet names where the kubelet has one)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    reserved_system_cpus: str | None = Field(default=None, alias="reservedSystemCPUs")
    reserved_resources: ReservedResources = Field(
        default_factory=ReservedResources, alias="reservedResources"
    )
    options: StaticOptions = Field(default_factory=StaticOptions)
    pin_memory: bool = Field(default=False, alias="pinMemory")


@dataclass(frozen=True, slots=True)
class StaticEntry:
    """One container: its exclusive CPUs (empty: shared pool)."""

    exclusive: CPUSet
    request_milli: int


@dataclass(frozen=True, slots=True)
class StaticState(PolicyState):
    #: a persistent map (`immutables.Map`): a decision shares all but O(log n) of it
    entries: Map[ContainerID, StaticEntry]
    #: the union of the entries' exclusive CPUs, derived when the state is built (`of`,
    #: `StaticPolicy._with`) so that the shared pool and the free CPUs need no pass over
    #: every container; not part of the value
    held: CPUSet = field(compare=False, repr=False)
    #: how many entries hold each of those CPUs (`kit.holders`); not part of the value
    holders: Holders = field(default_factory=Map, compare=False, repr=False)

    @classmethod
    def of(cls, entries: Mapping[ContainerID, StaticEntry]) -> StaticState:
        """The state holding `entries`."""
        return cls(
            entries=Map(entries),
            held=union(e.exclusive for e in entries.values()),
            holders=holders_of(e.exclusive for e in entries.values()),
        )

    def exclusive_cpus(self) -> CPUSet:
        return self.held


class StaticPolicy(Policy[StaticState]):
    """kubelet static CPU manager semantics (see the module docstring)."""

    name: ClassVar[str] = "static"

    def __init__(self, *, topology: Topology, config: Mapping[str, Any]) -> None:
        cfg = validate(StaticConfig, config, subject=SUBJECT)
        self.topology = topology
        self.config = cfg
        online = topology.online_cpus()
        if cfg.reserved_system_cpus is not None and cfg.reserved_resources.cpu is not None:
            raise invalid(
                SUBJECT,
                "",
                "both reservedSystemCPUs and reservedResources.cpu are set; expected at most one",
            )
        if cfg.reserved_system_cpus is not None:
            cpus = parse_cpu_list(cfg.reserved_system_cpus, subject=SUBJECT, path=SYSTEM_CPUS)
            if not cpus <= online:
                raise invalid(
                    SUBJECT,
                    SYSTEM_CPUS,
                    f"{cpus} includes CPUs {cpus - online} that are not online; online CPUs "
                    f"are {online}",
                )
            self.reserved = cpus
        elif cfg.reserved_resources.cpu is not None:
            amount = parse_cpu_amount(
                cfg.reserved_resources.cpu, subject=SUBJECT, path=RESERVED_CPU
            )
            if amount.cpuset is not None:
                if not amount.cpuset <= online:
                    raise invalid(
                        SUBJECT,
                        RESERVED_CPU,
                        f"{amount.cpuset} includes offline CPUs {amount.cpuset - online}; "
                        f"online CPUs are {online}",
                    )
                self.reserved = amount.cpuset
            else:
                self.reserved = lowest_cpus(topology, online, -(-amount.milli // 1000))
        else:
            self.reserved = IDSet()
        if self.reserved == online and online:
            raise invalid(
                SUBJECT,
                "",
                f"all online CPUs {online} are reserved; expected some left for containers",
            )
        self.shared_base = online - self.reserved if cfg.options.strict_cpu_reservation else online

    # ---- rendering ---------------------------------------------------------------------

    def shared_pool(self, state: StaticState) -> CPUSet:
        """The CPUs every non-exclusive container runs on."""
        return self.shared_base - state.exclusive_cpus()

    def _mems(self, cpus: CPUSet) -> NodeSet:
        return dram_near(self.topology, cpus) if self.config.pin_memory else IDSet()

    def pool_cpus(self, state: StaticState, assignments: Iterable[Assignment]) -> PoolCPUs:
        """The reserved CPUs and the shared pool."""
        return PoolCPUs(reserved=self.reserved, shared={"shared": self.shared_pool(state)})

    def render(self, state: StaticState) -> dict[ContainerID, Assignment]:
        """The assignment of every container in `state`."""
        shared = self.shared_pool(state)
        mems: dict[CPUSet, NodeSet] = {}
        return {cid: self._render_one(state, shared, cid, mems) for cid in state.entries}

    def _render_one(
        self, state: StaticState, shared: CPUSet, cid: ContainerID, mems: dict[CPUSet, NodeSet]
    ) -> Assignment:
        """One container's assignment; `mems` memoizes `_mems` (shared ones share it)."""
        entry = state.entries[cid]
        cpus = entry.exclusive or shared
        if cpus not in mems:
            mems[cpus] = self._mems(cpus)
        return Assignment(
            container_id=cid,
            cpus=cpus,
            mems=mems[cpus],
            kind=CPUKind.EXCLUSIVE if entry.exclusive else CPUKind.SHARED,
            pool="exclusive" if entry.exclusive else "shared",
        )

    def _render_changed(
        self, old: StaticState, new: StaticState, cid: ContainerID
    ) -> tuple[dict[ContainerID, Assignment], dict[ContainerID, Assignment]]:
        """Renderings in `old` and `new` of every container whose rendering can differ.

        Only `cid`'s entry differs between the two states, and any other container's
        rendering depends on its own entry and on the shared pool alone: so the others
        can change only when the shared pool did, and then exactly the shared ones do.
        `diff_updates` over these maps equals it over `render` of both states.  This is
        the policy's `decide.RenderChanged`.
        """
        shared_old, shared_new = self.shared_pool(old), self.shared_pool(new)
        cids = [cid]
        if shared_old != shared_new:
            cids.extend(
                c
                for c, e in new.entries.items()
                if not e.exclusive and c != cid and c in old.entries
            )
        mems: dict[CPUSet, NodeSet] = {}
        before = {c: self._render_one(old, shared_old, c, mems) for c in cids if c in old.entries}
        after = {c: self._render_one(new, shared_new, c, mems) for c in cids if c in new.entries}
        return before, after

    # ---- the protocol ------------------------------------------------------------------

    def initial_state(self) -> StaticState:
        return StaticState.of({})

    def exclusive_count(self, container: ContainerInfo) -> int:
        """Exclusive CPUs the container is entitled to (0: shared pool)."""
        milli = container.request.cpu_request_milli
        if container.qos_class is QoSClass.GUARANTEED and milli > 0 and milli % 1000 == 0:
            return milli // 1000
        return 0

    def free_cpus(self, state: StaticState) -> CPUSet:
        """CPUs a new exclusive allocation may take."""
        return self.topology.online_cpus() - self.reserved - state.exclusive_cpus()

    def _pick(
        self, state: StaticState, container: ContainerInfo, count: int, prefer: CPUSet
    ) -> CPUSet:
        free = self.free_cpus(state)
        tpc = self.topology.threads_per_core()
        full = self.config.options.full_pcpus_only
        if full and count % max(tpc, 1):
            raise AllocationError(
                f"{container.pretty}: requested {count} exclusive CPUs; expected a multiple of "
                f"{tpc} threads per core (full-pcpus-only); free CPUs: {free or 'none'}"
            )
        cpus = take_cpus(self.topology, free, count, full_cores_only=full, prefer=prefer)
        if cpus is None:
            what = "whole cores " if full else ""
            raise AllocationError(
                f"{container.pretty}: requested {count} exclusive CPUs; only {len(free)} free "
                f"{what}CPUs available ({free or 'none'})"
            )
        if not (self.shared_base - state.exclusive_cpus() - cpus):
            raise AllocationError(
                f"{container.pretty}: requested {count} exclusive CPUs; taking {cpus} would "
                f"leave the shared pool empty; expected at least one shared CPU to remain"
            )
        return cpus

    def _with(self, state: StaticState, cid: ContainerID, entry: StaticEntry | None) -> StaticState:
        """`state` with `cid`'s entry replaced by `entry` (None: dropped); the held CPUs
        follow the one entry that changed (`kit.holders`), whatever else runs."""
        held, holders = state.held, state.holders
        dropped = state.entries.get(cid)
        if dropped is not None and dropped.exclusive:
            held, holders = hold(held, holders, dropped.exclusive, -1)
        if entry is None:
            entries = state.entries.delete(cid) if dropped is not None else state.entries
        else:
            entries = state.entries.set(cid, entry)
            if entry.exclusive:
                held, holders = hold(held, holders, entry.exclusive, 1)
        return StaticState(entries=entries, held=held, holders=holders)

    def allocate(self, state: StaticState, container: ContainerInfo) -> Decision[StaticState]:
        if container.id in state.entries:
            return self.update(state, container)
        count = self.exclusive_count(container)
        if count == 0:
            entry = StaticEntry(IDSet(), container.request.cpu_request_milli)
            new = self._with(state, container.id, entry)
            return decide(self._render_changed, state, new, container.id, "shared pool")
        cpus = self._pick(state, container, count, IDSet())
        new = self._with(
            state, container.id, StaticEntry(cpus, container.request.cpu_request_milli)
        )
        return decide(self._render_changed, state, new, container.id, f"{count} exclusive CPUs")

    def release(self, state: StaticState, container_id: ContainerID) -> Decision[StaticState]:
        if container_id not in state.entries:
            return nothing_to_release(state)
        new = self._with(state, container_id, None)
        return decide_release(self._render_changed, state, new, container_id)

    def update(self, state: StaticState, container: ContainerInfo) -> Decision[StaticState]:
        entry = state.entries.get(container.id)
        if entry is None:
            return self.allocate(state, container)
        count = self.exclusive_count(container)
        if count == len(entry.exclusive):
            new = self._with(
                state,
                container.id,
                replace(entry, request_milli=container.request.cpu_request_milli),
            )
            return decide(self._render_changed, state, new, container.id, "unchanged")
        without = self._with(state, container.id, None)
        cpus = self._pick(without, container, count, entry.exclusive) if count else IDSet()
        entry = StaticEntry(cpus, container.request.cpu_request_milli)
        new = self._with(without, container.id, entry)
        return decide(self._render_changed, state, new, container.id, "resized")

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[StaticState]:
        st = self.initial_state()
        containers = each_once(containers)
        by_id = {c.id: c for c in containers}
        counts = {c.id: self.exclusive_count(c) for c in containers}
        # phase 1: keep valid exclusive placements exactly where they are; claims no
        # other claim overlaps first, then the conflicting ones (`common.order_claims`),
        # each only while it is disjoint from those kept before it
        claims = {
            c.id: c.current_cpus
            for c in containers
            if c.current_cpus is not None and self._claim_valid(c.current_cpus, counts[c.id])
        }
        for cid in order_claims(claims):
            cur = claims[cid]
            taken = st.exclusive_cpus()
            if cur.isdisjoint(taken) and self.shared_base - taken - cur:
                milli = by_id[cid].request.cpu_request_milli
                st = self._with(st, cid, StaticEntry(cur, milli))
        pending = [(c, counts[c.id]) for c in containers if counts[c.id] and c.id not in st.entries]
        # phase 2: re-pick the others, preferring their current CPUs; shared if impossible
        notes = []
        for c, count in pending:
            try:
                cpus = self._pick(st, c, count, c.current_cpus or IDSet())
            except AllocationError as exc:
                notes.append(str(exc))
                cpus = IDSet()
            st = self._with(st, c.id, StaticEntry(cpus, c.request.cpu_request_milli))
        # phase 3: everyone else on the shared pool
        for c in containers:
            if c.id not in st.entries:
                st = self._with(st, c.id, StaticEntry(IDSet(), c.request.cpu_request_milli))
        updates = moved(sorted(containers, key=lambda c: c.id), self.render(st))
        reason = "rebuilt" + ("; fell back to shared: " + "; ".join(notes) if notes else "")
        return Decision(state=st, updates=updates, reason=reason)

    # ---- placement records (issue 24; the rule is `kit.rebuild.restart`) --------------

    def record(self, state: StaticState, container_id: ContainerID) -> Meaning | None:
        """A container's exclusive CPUs ("" on the shared pool) and its request."""
        entry = state.entries.get(container_id)
        if entry is None:
            return None
        return {"exclusive": str(entry.exclusive), "milli": entry.request_milli}

    def restore(
        self, containers: Sequence[tuple[ContainerInfo, Meaning]], layout: Meaning | None
    ) -> StaticState:
        """The entries the records hold, each checked against what the policy would grant
        the container now (its count, usable CPUs, disjoint from the others); it keeps
        no layout."""
        if layout is not None:
            raise RecordError(f"policy {self.name} keeps no layout record; found one")
        entries: dict[ContainerID, StaticEntry] = {}
        held: CPUSet = IDSet()
        for c, meaning in containers:
            exclusive, milli = meaning.get("exclusive"), meaning.get("milli")
            if not isinstance(exclusive, str) or type(milli) is not int:
                raise RecordError(f"{c.pretty}: expected exclusive and milli; found {meaning}")
            try:
                cpus = IDSet.parse(exclusive)
            except IDSetError as exc:
                raise RecordError(f"{c.pretty}: {exc}") from exc
            count = self.exclusive_count(c)
            if cpus and (not self._claim_valid(cpus, count) or not cpus.isdisjoint(held)):
                raise RecordError(f"{c.pretty}: recorded CPUs {cpus} are not a grant now")
            entries[c.id] = StaticEntry(cpus, milli)
            held |= cpus
        if entries and not self.shared_base - held:
            raise RecordError(f"recorded grants {held} leave no shared CPU")
        return StaticState.of(entries)

    def _claim_valid(self, cpus: CPUSet, count: int) -> bool:
        """Whether `cpus` could be the grant of a container entitled to `count` CPUs.

        Judged on an otherwise empty machine: the right size, usable, whole cores where
        required, and leaving the shared pool some CPU.
        """
        if count == 0 or len(cpus) != count:
            return False
        if not cpus <= self.topology.online_cpus() - self.reserved:
            return False
        if self.config.options.full_pcpus_only and not self._whole_cores(cpus):
            return False
        return bool(self.shared_base - cpus)

    def _whole_cores(self, cpus: CPUSet) -> bool:
        return all(
            threads == self.topology.core_cpus(core)
            for core, threads in self.topology.cores_of(cpus).items()
        )


#: the registration (the ``nri_resmgr.policies`` entry point names it)
RECORD = PolicyRecord(StaticPolicy)
