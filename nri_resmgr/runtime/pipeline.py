"""The pipeline: one NRI event at a time, from messages to a decision to messages.

Theory of operation
-------------------
A `Pipeline` owns the in-memory view of the node: the pods and containers it has been
told about, the `Assignment` of each container, and the active policy's immutable
`PolicyState`.  Each public method handles one NRI event and is synchronous: it never
awaits, so the asyncio daemon serializes events simply by calling it from its handlers
(under one lock, to make that explicit), and the simulator calls it in a loop.

Every event follows the same steps:

1. **adapt** the NRI messages into domain values (`nri_resmgr.runtime.adapter`); at
   CreateContainer the injected `resolve_hints` (the daemon's sysfs lookup) adds the
   topology hints of the container's devices and mounts;
2. **decide**: ask the `ClassSelector` for the container's RDT and block I/O classes and
   the policy for a `Decision` (pure; may raise `AllocationError` / `AnnotationError`);
3. **render** the decision as a `ContainerAdjustment` and `ContainerUpdate`\\ s
   (`nri_resmgr.runtime.adjustments`);
4. let the **controllers** do their out-of-band work (resctrl groups, block I/O files),
   through the hooks `nri_resmgr.control.hooks.Controller` declares (the CPU class files
   and interrupt affinities follow at the commit, from the committed state); a hook
   of the event's own work fails the event, the others are best effort, by the one
   rule of `nri_resmgr.runtime.fanout`;
5. **commit**: only now are the policy state, the container table and the assignments
   replaced.  An exception in steps 1-4 leaves the pipeline exactly as it was, and the
   daemon turns it into an RPC error whose message reaches the runtime.

Release points: a container's CPUs are released at StopContainer (an init container
hands them back as soon as it exits; a restarted container is a new container), or at
RemoveContainer / RemovePodSandbox if no stop was seen.  The updates a release produces
(a shared pool growing back) are returned; for StopContainer they go in the response,
for the events whose responses carry no updates the daemon sends them unsolicited.

UpdateContainer short-circuit: the kubelet re-sends a container's resources at times
(reconcile loops, a CPU manager writing cpusets).  When the resources we read from the
request are the same as the container's known `Request`, nothing changed for us: the
answer is an update that reasserts our own cpuset and mems for the container, so the
kubelet's value never wins.  A real change (in-place resize) goes to `policy.update`.

Synchronize (a fresh start or a reconnect) throws the view away and rebuilds it from
what the runtime reports, read by `nri_resmgr.runtime.synchronize` (every running
container accounted for): `policy.rebuild` keeps every valid placement where it is,
fixes invalid ones, and the updates returned are only for containers that must move.
With a `RecordStore` (the daemon's state directory), every commit keeps the placement
records of the containers it changed (the daemon's store writes them once its reply is
sent, one append per event-loop turn; `nri_resmgr.runtime.record_store`), and a
Synchronize reads them back: `nri_resmgr.policy.kit.rebuild.restart` uses a record only
where the runtime reports exactly the cpuset and memory nodes it holds, and rebuilds the
rest (issue 24; docs/architecture.md, "State and restarts").

Assignments of containers that a decision did not mention are tracked by the pipeline
itself; after a rebuild, the policy's `render(state)` hook (None by the contract's
default) gives every container's `Assignment`, so reports show what the policy believes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from nri_api import api
from nri_resmgr.control.classes import inherit_classes, no_classes
from nri_resmgr.control.hooks import ClassChoice, ClassSelector, Controller
from nri_resmgr.limits import DEFAULT_LIMITS, Limits
from nri_resmgr.model import (
    Assignment,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
    DeviceRef,
    MountRef,
    Pod,
    PodID,
    PolicyState,
    ResmgrError,
    TopologyHint,
)
from nri_resmgr.ops.logs import EventLog, get_logger
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy.kit.rebuild import restart
from nri_resmgr.runtime import adapter
from nri_resmgr.runtime.adjustments import adjustment_for, cpuset_updates_for
from nri_resmgr.runtime.decision_log import DecisionLog
from nri_resmgr.runtime.fanout import MachineUse, best_effort
from nri_resmgr.runtime.record_store import Defer, RecordStore
from nri_resmgr.runtime.synchronize import account_for, as_placed, read_runtime_view
from nri_resmgr.topology.cpuset import IDSet

__all__ = [
    "ClassChoice",
    "ClassSelector",
    "Controller",
    "DecisionHook",
    "HintResolver",
    "Pipeline",
    "PipelineError",
]

#: the component of the pipeline's own log lines (``log.debug`` names it)
_COMPONENT = "pipeline"
#: ``resolve_hints(devices, mounts)``: the locality of a new container's devices and
#: mounts (sysfs, IO)
HintResolver = Callable[[tuple[DeviceRef, ...], tuple[MountRef, ...]], tuple[TopologyHint, ...]]
#: issue 27 hook: ``on_decision(event, container, decision)`` after a create or update
#: commits (the daemon's `nri_resmgr.view.record.DecisionRecord.note`)
DecisionHook = Callable[[str, ContainerInfo, Decision], None]


class PipelineError(ResmgrError):
    """An event the pipeline cannot handle (e.g. a container of an unknown pod)."""


class Pipeline:
    """The state holder between the NRI handlers and a pure policy (module docstring)."""

    def __init__(
        self,
        policy: Policy,
        *,
        controllers: Sequence[Controller] = (),
        select_classes: ClassSelector | None = None,
        log: EventLog | None = None,
        limits: Limits = DEFAULT_LIMITS,
        resolve_hints: HintResolver | None = None,
        on_decision: DecisionHook | None = None,
        record_store: RecordStore | None = None,
        defer_lines: Defer | None = None,
    ) -> None:
        self.policy: Policy = policy
        #: the placement records in the state directory (None: none kept)
        self.record_store = record_store
        #: issue 27 hook: told of each create/update decision committed
        self.on_decision = on_decision
        #: the shell's sysfs lookup of a new container's device and mount locality
        self.resolve_hints = resolve_hints
        #: bounds on cpusets and JSON annotations read from the runtime's messages
        self.limits = limits
        self.controllers: tuple[Controller, ...] = tuple(controllers)
        self._select: ClassSelector = select_classes or no_classes
        #: warnings (skipped input, failed controllers); decisions go to `decisions`
        self.log: EventLog = log if log is not None else get_logger(_COMPONENT)
        #: one line per decision (`runtime.decision_log`; put off by `defer_lines`)
        component = None if log is not None else _COMPONENT
        self.decisions = DecisionLog(self.log, component=component, defer=defer_lines)
        self.state: PolicyState = policy.initial_state()
        self.pods: dict[PodID, Pod] = {}
        self.containers: dict[ContainerID, ContainerInfo] = {}
        #: the containers of each pod, in creation order (kept with `containers`): a
        #: RemovePodSandbox must not scan every live container
        self._of_pod: dict[PodID, dict[ContainerID, None]] = {}
        self.assignments: dict[ContainerID, Assignment] = {}
        #: created but not started yet: an update sent now may be lost, because the
        #: runtime has already written the OCI bundle the task will start from
        self.unstarted: set[ContainerID] = set()
        #: unstarted containers that were sent an update: reasserted at PostStartContainer
        self.unconfirmed: set[ContainerID] = set()
        #: block I/O classes we apply ourselves are not the runtime's to resolve: sending
        #: the name would make a runtime without its own class config fail the container
        self.runtime_blockio: bool = not any(c.name == "blockio" for c in self.controllers)
        #: what the committed state wants of the machine, handed to the controllers
        self.machine_use = MachineUse(self.controllers, self.log)

    # -- helpers ---------------------------------------------------------------------

    def _merge_update(self, update: Assignment) -> Assignment:
        """An update from the policy keeps the classes the container already has."""
        return inherit_classes(update, self.assignments.get(update.container_id))

    def _commit(
        self,
        decision: Decision,
        *,
        subject: Assignment | None = None,
        updates: Sequence[Assignment] = (),
        full: bool = False,
        gone: ContainerID | None = None,
    ) -> None:
        """Take the decision's state; record the subject's and the updated assignments.

        A decision names every container it changes, so only those are recorded (O(changes),
        not O(live containers)). `full` re-renders every assignment from the policy's state:
        after a rebuild, where kept containers get their kind and pool that way.  `gone`
        is the container a release took away.  The placement records follow (written
        now, or after the reply when the store defers: `RecordStore.keep`).
        """
        self.state = decision.state
        self.machine_use.apply(self.policy, self.state)
        changed = [u.container_id for u in updates if u.container_id in self.containers]
        if subject is not None:
            self.assignments[subject.container_id] = subject
            changed.append(subject.container_id)
        for u in updates:
            if u.container_id in self.containers:
                self.assignments[u.container_id] = u
        if full:
            rendered = self.policy.render(self.state)
            if rendered is not None:
                for cid, a in rendered.items():
                    if cid in self.containers:
                        self.assignments[cid] = inherit_classes(a, self.assignments.get(cid))
        if self.record_store is not None:
            self.record_store.keep(
                self.policy, self.state, self.assignments, changed=changed, full=full, gone=gone
            )

    def _best_effort(self, hook: Callable[[Controller], None]) -> None:
        """`hook` on every controller, by the one rule for best-effort hooks (`fanout`)."""
        best_effort(self.controllers, hook, log=self.log)

    def close(self) -> None:
        """The daemon stops: the records queued are written; every controller's
        `stopped` (best effort)."""
        self.flush_records()
        self._best_effort(lambda ctl: ctl.stopped())

    def flush_records(self) -> None:
        """Write the records and the decision lines queued (before this pipeline is
        closed or replaced: no write of its own may follow another pipeline's)."""
        self.decisions.flush()
        if self.record_store is not None:
            self.record_store.flush()

    def _add(self, info: ContainerInfo) -> None:
        """Record `info` (new, or replacing the container's earlier info)."""
        old = self.containers.get(info.id)
        if old is not None and old.pod.id != info.pod.id:
            self._forget(info.id)
        self.containers[info.id] = info
        self._of_pod.setdefault(info.pod.id, {})[info.id] = None

    def _forget(self, cid: ContainerID) -> None:
        info = self.containers.pop(cid)
        of_pod = self._of_pod.get(info.pod.id)
        if of_pod is not None:
            of_pod.pop(cid, None)
            if not of_pod:
                del self._of_pod[info.pod.id]

    def _note_updates(self, updates: Iterable[Assignment]) -> None:
        """Remember updates aimed at containers that have not started yet."""
        for u in updates:
            if u.container_id in self.unstarted:
                self.unconfirmed.add(u.container_id)

    def _pod_of(self, sandbox: api.PodSandbox, container: api.Container | None) -> Pod:
        known = self.pods.get(PodID(sandbox.id))
        if known is not None:
            return known
        fallback = (
            container.linux.resources
            if container is not None and container.HasField("linux")
            else None
        )
        return adapter.pod_from_nri(sandbox, fallback_resources=fallback)

    # -- pod events ------------------------------------------------------------------

    def run_pod(self, sandbox: api.PodSandbox) -> None:
        """RunPodSandbox: remember the pod; controllers set up pod-level state."""
        pod = adapter.pod_from_nri(sandbox)
        for ctl in self.controllers:
            ctl.pod_added(pod)
        self.pods[pod.id] = pod

    def remove_pod(self, sandbox: api.PodSandbox) -> list[api.ContainerUpdate]:
        """RemovePodSandbox: release leftovers of the pod, forget it; updates to send."""
        pid = PodID(sandbox.id)
        updates: list[api.ContainerUpdate] = []
        for cid in list(self._of_pod.get(pid, ())):
            updates.extend(self._release(cid, event="released with pod"))
        pod = self.pods.pop(pid, None)
        if pod is not None:
            self._best_effort(lambda ctl: ctl.pod_removed(pod))
        return updates

    # -- container events ------------------------------------------------------------

    def create(
        self,
        sandbox: api.PodSandbox,
        container: api.Container,
        extra_hints: tuple[TopologyHint, ...] = (),
    ) -> tuple[api.ContainerAdjustment, list[api.ContainerUpdate]]:
        """CreateContainer: the new container's adjustment and the updates of others.

        `extra_hints` come from outside the runtime's message (the kubelet's devices)."""
        pod = self._pod_of(sandbox, container)
        info = adapter.container_from_nri(pod, container, limits=self.limits)
        hints = extra_hints
        if self.resolve_hints is not None:
            devices, mounts = adapter.devices_and_mounts(container)
            if devices or mounts:
                hints = self.resolve_hints(devices, mounts) + hints
        if hints:
            info = dataclasses.replace(info, topology_hints=hints)
        base = self.state
        if info.id in self.containers:
            # a repeated CreateContainer (e.g. after a failed attempt): start afresh, but
            # only in the state handed to the policy; nothing changes unless it succeeds
            base = self.policy.release(base, info.id).state
        choice = self._select(info)
        decision = self.policy.allocate(base, info)
        if decision.assignment is None:
            raise PipelineError(
                f"{info.pretty}: policy {self.policy.name} returned no assignment for a new "
                "container; expected one"
            )
        subject = inherit_classes(decision.assignment, choice)
        others = [self._merge_update(u) for u in decision.updates if u.container_id != info.id]
        adjust = adjustment_for(
            subject if self.runtime_blockio else dataclasses.replace(subject, blockio_class=None)
        )
        updates = cpuset_updates_for(others)
        for ctl in self.controllers:
            ctl.container_assigned(info, subject)
            more = ctl.adjustment(info, subject)
            if more is not None:
                adjust.MergeFrom(more)
        self.pods.setdefault(pod.id, pod)
        self._add(info)
        self._commit(decision, subject=subject, updates=others)
        self.unstarted.add(info.id)
        self.unconfirmed.discard(info.id)
        self._note_updates(others)
        self.decisions.decision(
            "create", info, self.assignments.get(info.id, subject), decision.reason
        )
        self.decisions.consequences(info, others, decision.reason, containers=self.containers)
        if self.on_decision is not None:  # issue 27 hook
            self.on_decision("create", info, decision)
        return adjust, updates

    def started(
        self, sandbox: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]:
        """PostStartContainer: the task runs in its cgroup now.

        Controllers write into the cgroup (block I/O files).  If the container was sent an
        update before it started (a shrinking shared pool, a Synchronize after a restart),
        that update may never have reached it: the runtime starts the task from the OCI
        bundle written at creation.  So its assignment is reasserted, to be sent unsolicited.
        """
        cid = ContainerID(container.id)
        self.unstarted.discard(cid)
        info, a = self.containers.get(cid), self.assignments.get(cid)
        if info is None and container.HasField("linux"):
            return self._take_in(sandbox, container)
        if info is None or a is None:
            self.unconfirmed.discard(cid)
            return []
        for ctl in self.controllers:
            ctl.container_started(info, a)
            ctl.task_started(info, a, container.pid)
        if cid not in self.unconfirmed:
            return []
        self.unconfirmed.discard(cid)
        if a.kind is CPUKind.NONE:
            return []
        self.decisions.decision("reassert", info, a, "updated before it started")
        return cpuset_updates_for([a])

    def update(
        self,
        sandbox: api.PodSandbox,
        container: api.Container,
        resources: api.LinuxResources | None,
    ) -> list[api.ContainerUpdate]:
        """UpdateContainer: reassert on a no-op reconcile, reallocate on a real change."""
        cid = ContainerID(container.id)
        known = self.containers.get(cid)
        if known is None:
            self.log.warning(
                "update of an unknown container ignored", id=container.id, name=container.name
            )
            return []
        info = adapter.container_from_nri(
            known.pod, container, resources=resources, kind=known.kind, limits=self.limits
        )
        current = self.assignments.get(cid)
        if info.request == known.request:
            if current is None:
                return []
            self.decisions.decision("reassert", known, current, "resources unchanged")
            return cpuset_updates_for([current])
        decision = self.policy.update(self.state, info)
        subject = decision.assignment
        if subject is not None:
            subject = inherit_classes(subject, self.assignments.get(cid))
        others = [self._merge_update(u) for u in decision.updates if u.container_id != cid]
        out = cpuset_updates_for(([subject] if subject is not None else []) + others)
        if subject is not None:
            for ctl in self.controllers:
                ctl.container_assigned(info, subject)
        self._add(info)
        self._commit(decision, subject=subject, updates=others)
        self._note_updates(([subject] if subject is not None else []) + others)
        self.decisions.decision("update", info, self.assignments.get(cid), decision.reason)
        self.decisions.consequences(info, others, decision.reason, containers=self.containers)
        if self.on_decision is not None:  # issue 27 hook
            self.on_decision("update", info, decision)
        return out

    def _release(self, cid: ContainerID, *, event: str) -> list[api.ContainerUpdate]:
        info = self.containers.get(cid)
        if info is None:
            return []
        decision = self.policy.release(self.state, cid)
        others = [self._merge_update(u) for u in decision.updates if u.container_id != cid]
        updates = cpuset_updates_for(others)
        self._best_effort(lambda ctl: ctl.container_released(info))
        self._forget(cid)
        self.assignments.pop(cid, None)
        self.unstarted.discard(cid)
        self.unconfirmed.discard(cid)
        self._commit(decision, updates=others, gone=cid)
        self._note_updates(others)
        self.decisions.decision(event, info, None, decision.reason)
        self.decisions.consequences(info, others, decision.reason, containers=self.containers)
        return updates

    def stop(self, sandbox: api.PodSandbox, container: api.Container) -> list[api.ContainerUpdate]:
        """StopContainer: release the container's resources; updates of others."""
        return self._release(ContainerID(container.id), event="stop")

    def remove(
        self, sandbox: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]:
        """RemoveContainer: release if no stop was seen; updates to send unsolicited."""
        return self._release(ContainerID(container.id), event="remove")

    # -- synchronize -----------------------------------------------------------------

    def synchronize(
        self, sandboxes: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> list[api.ContainerUpdate]:
        """Synchronize: rebuild the view from the runtime's; updates only for movers
        (`nri_resmgr.runtime.synchronize`: how the runtime's report is read)."""
        view = read_runtime_view(
            sandboxes, containers, select=self._select, limits=self.limits, log=self.log
        )
        return self._rebuild(
            view.pods, view.containers, view.choices, event="synchronize", unstarted=view.unstarted
        )

    def adopt(self, previous: Pipeline) -> list[api.ContainerUpdate]:
        """Live reconfiguration: take over `previous`'s pods and containers.

        This pipeline (a new policy or configuration) rebuilds its state from the
        containers `previous` knows, each where `previous` placed it; containers keep their
        RDT and block I/O classes (a running container's classes cannot change).  Returns
        the updates for the containers the new policy moves.  Raises like
        `Policy.rebuild`; on failure this pipeline is unchanged and `previous` untouched.
        """
        previous.flush_records()
        infos, choices = as_placed(previous.containers, previous.assignments)
        return self._rebuild(
            dict(previous.pods),
            infos,
            choices,
            event="reconfigure",
            unstarted=previous.unstarted,
            unconfirmed=previous.unconfirmed,
        )

    def _take_in(
        self, sandbox: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]:
        """A container that started without this pipeline having seen it created.

        The runtime created it while no plugin was registered (a restart) and it was not
        yet in the list Synchronize gave (CRI-O lists a container only once created), so
        it runs on whatever cpuset the runtime gave it, possibly CPUs exclusive to another.
        It is taken in as Synchronize takes a running container: a rebuild with everything
        known where it is placed (valid placements stay) and this one at its current
        cpuset; the updates (for it, and any container its placement moves) are sent
        unsolicited.  A container no placement can be made for is logged and left alone.
        """
        try:
            pod = self.pods.get(PodID(sandbox.id)) or adapter.pod_from_nri(sandbox)
            info = account_for(pod, container, limits=self.limits, log=self.log)
        except ResmgrError as exc:
            self.log.warning(
                "started: unknown container not taken in", id=container.id, error=str(exc)
            )
            return []
        infos, choices = as_placed(self.containers, self.assignments)
        try:
            choices[info.id] = self._select(info)
        except ResmgrError as exc:
            self.log.warning("started: classes not chosen", id=info.id, error=str(exc))
            choices[info.id] = ClassChoice()
        pods = dict(self.pods)
        pods.setdefault(pod.id, pod)
        return self._rebuild(
            pods,
            [*infos, info],
            choices,
            event="take-in",
            unstarted=self.unstarted,
            unconfirmed=self.unconfirmed,
        )

    def _rebuild(
        self,
        pods: dict[PodID, Pod],
        infos: list[ContainerInfo],
        choices: Mapping[ContainerID, ClassChoice],
        *,
        event: str,
        unstarted: Iterable[ContainerID] = (),
        unconfirmed: Iterable[ContainerID] = (),
    ) -> list[api.ContainerUpdate]:
        if event == "synchronize" and self.record_store is not None:
            decision = restart(self.policy, infos, self.record_store.load())
        else:
            decision = self.policy.rebuild(infos)
        self.pods = pods
        self.containers = {}
        self._of_pod = {}
        for i in infos:
            self._add(i)
        self.assignments = {}
        for i in infos:
            choice = choices[i.id]
            self.assignments[i.id] = Assignment(
                container_id=i.id,
                cpus=i.current_cpus or IDSet(),
                mems=i.current_mems or IDSet(),
                kind=CPUKind.NONE,
                rdt_class=choice.rdt_class,
                blockio_class=choice.blockio_class,
            )
        live = list(pods.values())
        self._best_effort(lambda ctl: ctl.synchronized(live))
        movers = [self._merge_update(u) for u in decision.updates]
        updates = cpuset_updates_for(movers)
        self._commit(decision, updates=movers, full=True)
        self.unstarted = {cid for cid in unstarted if cid in self.containers}
        self.unconfirmed = {cid for cid in unconfirmed if cid in self.unstarted}
        self._note_updates(movers)
        moved = {u.container_id for u in movers}
        self.log.info("rebuilt", on=event, reason=decision.reason, moved=len(moved))
        why = "moved: " + decision.reason
        rows = [(i, self.assignments[i.id], why if i.id in moved else "kept") for i in infos]
        self.decisions.rebuilt(event, rows)
        return updates

    def reassert(self, cids: Iterable[ContainerID]) -> list[api.ContainerUpdate]:
        """Updates that re-send the current placement of those of `cids` still live."""
        return cpuset_updates_for(
            self.assignments[cid]
            for cid in cids
            if cid in self.containers and cid in self.assignments
        )

    # -- reports ---------------------------------------------------------------------

    def snapshot(self) -> list[tuple[ContainerInfo, Assignment | None]]:
        """Every live container with its assignment, in creation order."""
        return [(c, self.assignments.get(cid)) for cid, c in self.containers.items()]
