"""The daemon: an NRI plugin whose hooks feed the pipeline.

Theory of operation
-------------------
`ResmgrPlugin` is an `nri_api.stub.Plugin` subclass.  The stub owns the connection
(register, configure, synchronize, dispatch, reconnect); this class owns one `Pipeline`
and turns every subscribed NRI event into one pipeline call, serialized by an
`asyncio.Lock` (the pipeline is synchronous, so the lock only makes the one-event-at-a-
time rule explicit and survives any future await inside a handler).

Events and what they do:

==========================  ===============================================================
RunPodSandbox               remember the pod; controllers make pod-level state; the
                            kubelet is asked for its devices (`kubelet_devices`)
CreateContainer             decide (with the kubelet's device hints); reply ``adjust``
                            + ``update`` (other containers)
PostStartContainer          controllers write into the task's cgroup (block I/O classes);
                            an update sent before the container started is reasserted
UpdateContainer             reassert our cpuset on a no-op reconcile, reallocate on resize
StopContainer               release; reply ``update`` (the shared pool grows back)
RemoveContainer             release if no stop was seen; updates go out unsolicited
RemovePodSandbox            release leftovers, controllers drop pod-level state
Synchronize                 rebuild from the runtime's view; updates only for movers,
                            each marked ``ignore_failure`` (restarts, below)
==========================  ===============================================================

Updates for other containers travel in the event's own reply whenever the reply has an
``update`` field.  RemoveContainer and RemovePodSandbox replies have none, so their
updates go through `update_containers`, which the stub defers until the hook has
returned (calling it synchronously from a hook deadlocks runtimes up to NRI v0.12.1).

Every event's pipeline call runs with the cyclic collector off; it comes back after the
reply, with the records (`nri_resmgr.ops.collector.handling`).

Failures: a `ResmgrError` (allocation, annotation, adapter) becomes an RPC error with the
error's own message, which the runtime passes up (containerd fails the CRI request);
the pipeline state is unchanged.  Any other exception is a bug: it is logged with its
traceback and reported as ``internal error: ...``.

Configuration: the daemon starts from `--config` (or defaults) with `--policy` on top.  A
pre-registered plugin receives its configuration file's content in
``ConfigureRequest.config``; when that string is not empty it is parsed as the daemon
config and the policy and pipeline are rebuilt from it before Synchronize.  A bad config
fails Configure, and the runtime drops the plugin (better than running with defaults).

Bounds: the ``limits`` section of the configuration (`nri_resmgr.limits.Limits`) bounds
what one message or annotation may cost; its protocol part goes to the stub as constructor
parameters, its input part to the pipeline's adapter.  An unsolicited update that gets no
answer (`updates_failed`) is re-asserted with the container's current placement at the
next event, at most `MAX_REASSERTS` times.

Restarts: the runtime's Synchronize (on first connection and after every reconnect)
rebuilds the pipeline state from the containers the runtime reports, so a restarted daemon
keeps correctly placed containers where they are.  The reply's updates are best effort:
CRI-O 1.36 (`syncPlugin`, NRI v0.11) fails the whole sync if one that is not marked
``ignore_failure`` fails (a container being stopped), and then never sends the plugin an
event (docs/operations.md, "CRI-O: a restart ..."); containerd ignores such failures.

The process around the plugin (options, logging, topology, signals, the HTTP endpoint, the
Kubernetes side) is `nri_resmgr.runtime.process`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from nri_api import api
from nri_api.errors import ConnectionClosed, RPCError, StatusCode
from nri_api.events import NRIVersion
from nri_api.stub import DEFAULT_UPDATE_TIMEOUT, Plugin, RuntimeInfo
from nri_resmgr.config import Config, load_config
from nri_resmgr.control.cpuclass.files import RECORD_NAME as CPU_CLASS_RECORD
from nri_resmgr.control.cpuclass.files import CPUClassFiles
from nri_resmgr.control.irq import IrqFiles
from nri_resmgr.model import (
    ConfigError,
    ContainerID,
    ContainerInfo,  # issue 27 hook
    Decision,
    ResmgrError,
    TopologyHint,
)
from nri_resmgr.ops import collector
from nri_resmgr.ops.logs import (
    configure_logging,
    get_logger,
    log_config_warnings,
    route_stdlib_logging,
)
from nri_resmgr.ops.metrics import (
    HealthState,
    Metrics,
    StateSnapshot,
    state_snapshot,
)
from nri_resmgr.policy.base import Policy
from nri_resmgr.runtime.after_reply import AfterReply
from nri_resmgr.runtime.assembly import build_pipeline
from nri_resmgr.runtime.fanout import best_effort
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.topology.model import Topology
from nri_resmgr.view.events import (  # issue 27: events on the pod
    EventQueue,
    EventsConfig,
    PodRef,
    decision_note,
    refusal_note,
)
from nri_resmgr.view.record import DecisionRecord

if TYPE_CHECKING:
    from nri_resmgr.control.resctrl.monitor import MonSample

__all__ = ["ResmgrPlugin"]

DEFAULT_PLUGIN_NAME = "resmgr"
#: NRI releases before this one never synchronize pre-registered plugins
NO_PREREGISTERED_SYNC_BEFORE = NRIVersion(0, 8, 0)
#: the first NRI release with the LinuxRdt adjustment (closID, enableMonitoring)
LINUX_RDT_SINCE = NRIVersion(0, 11, 0)
DEFAULT_PLUGIN_INDEX = "90"
#: how often a container whose unsolicited update failed is re-asserted
MAX_REASSERTS = 3
#: a missing socket's hint is logged at the first failure and then every this many
HINT_EVERY = 12


class KubeletDevices(Protocol):
    """The devices the kubelet gave each pod (`nri_resmgr.kube.podresources.
    PodResourcesCache`): asked for at RunPodSandbox, hints at CreateContainer (waiting no
    longer than its own deadline, never failing), filled at Synchronize."""

    def prefetch(self, namespace: str, name: str) -> None: ...

    async def hints(
        self, namespace: str, name: str, container: str
    ) -> tuple[TopologyHint, ...]: ...

    async def refresh(self) -> None: ...

    def forget(self, namespace: str, name: str) -> None: ...


class ResmgrPlugin(Plugin):
    """The nri-resmgr NRI plugin (see the module docstring)."""

    def __init__(
        self,
        *,
        config: Config,
        topology: Topology,
        policy_override: str | None = None,
        resctrl_root: str | None = None,
        cgroup_root: str | None = None,
        state_dir: str | None = None,
        sysfs_root: str | None = None,
        metrics: Metrics | None = None,
        health: HealthState | None = None,
        **kwargs: Any,
    ) -> None:
        limits = config.limits
        kwargs.setdefault("max_in_flight", limits.max_in_flight)
        kwargs.setdefault("max_rejected_pending", limits.max_rejected_pending)
        kwargs.setdefault("max_sync_chunks", limits.max_sync_chunks)
        kwargs.setdefault("max_sync_bytes", limits.max_sync_bytes)
        super().__init__(**kwargs)
        #: containers whose unsolicited update failed: re-asserted at the next event
        #: (failed attempts so far); cleared by Synchronize, which places everything anew
        self.reassert_pending: dict[ContainerID, int] = {}
        #: the failed attempts of the containers of the last re-assert, while it is out
        self._reasserted: dict[ContainerID, int] = {}
        #: seconds an unsolicited update waits for the runtime's answer
        self.update_timeout = DEFAULT_UPDATE_TIMEOUT
        self.topology = topology
        self.policy_override = policy_override
        self.resctrl_root = resctrl_root
        self.cgroup_root = cgroup_root
        self.state_dir = state_dir
        #: where devices' and mounts' locality is read (None: no topology hints)
        self.sysfs_root = sysfs_root
        #: the kubelet's devices (``--pod-resources-socket``; None: not asked)
        self.kubelet_devices: KubeletDevices | None = None
        #: interrupt affinities under the root's proc, kept across reconfigurations (their
        #: originals are put back at `close`); None without a sysfs root
        self.irq_files = IrqFiles(Path(sysfs_root) / "proc") if sysfs_root is not None else None
        #: CPU class files under the sysfs root, kept across reconfigurations (their
        #: originals are put back at `close`, and recorded in `state_dir` when given);
        #: None without a sysfs root
        self.cpu_class_files = (
            CPUClassFiles(
                sysfs_root,
                record=Path(state_dir) / CPU_CLASS_RECORD if state_dir is not None else None,
            )
            if sysfs_root is not None
            else None
        )
        self.metrics = metrics or Metrics()
        # pool and container gauges are computed when scraped, not after every event:
        # a snapshot walks every live container, which must stay off the event path
        self.metrics.refresh = self.state_snapshot
        self.metrics.rdt_refresh = self.rdt_samples
        self.health = health or HealthState()
        self.rlog = get_logger("daemon")
        #: the log file `configure_logging` opened for a config that came via Configure
        self.log_handle: IO[str] | None = None
        self.config = config
        #: issue 27: the last decision per container, kept across reconfigurations
        self.decisions = DecisionRecord()
        #: issue 27: the pods' events, off until the Kubernetes side posts them
        self.pod_events = EventQueue(EventsConfig(enabled=False))
        #: the records, decision lines, issue-27 note and the collector's return, run
        #: after the reply has been sent, a large one whole (`runtime.after_reply`)
        self._after_reply = AfterReply(self)
        self.pipeline = self._build(config)
        self.lock = asyncio.Lock()

    def _build(self, config: Config) -> Pipeline:
        return build_pipeline(
            config,
            topology=self.topology,
            policy=self.policy_override,
            resctrl_root=self.resctrl_root,
            cgroup_root=self.cgroup_root,
            state_dir=self.state_dir,
            runtime_rdt=self._runtime_has_linux_rdt,
            sysfs_root=self.sysfs_root,
            irq_files=self.irq_files,
            cpu_class_files=self.cpu_class_files,
            on_decision=self._decided,  # issue 27 hook
            defer_records=self._after_reply,
            defer_lines=self._after_reply,
        )

    def _decided(self, event: str, info: ContainerInfo, decision: Decision) -> None:
        """issue 27 hook: the decision record and the pod's event, made after the reply
        as the decision's log line is (`_after_reply`; 6 us of a creation's before it)."""
        self._after_reply(
            functools.partial(self._note, self.pipeline.policy, event, info, decision)
        )

    def _note(self, policy: Policy, event: str, info: ContainerInfo, decision: Decision) -> None:
        """The decision record and the pod's event (both O(1)); the event's note is made
        only for a queue that takes notes (events on)."""
        self.decisions.note(event, info, decision)
        if self.pod_events.config.enabled:
            self.pod_events.offer(decision_note(policy, info, decision), time.monotonic())

    def _runtime_has_linux_rdt(self) -> bool:
        runtime = self.runtime
        return runtime is not None and runtime.nri_version >= LINUX_RDT_SINCE

    def _check_runtime_fields(self, pipeline: Pipeline, runtime: RuntimeInfo | None) -> None:
        """Refuse a configuration whose adjustments the runtime's NRI release would drop
        (a scheduling class on a runtime without NRI's LinuxScheduler, a memory policy
        without its LinuxMemoryPolicy: the controllers' `nri_requirements`): `ConfigError`."""
        if runtime is None:
            return
        missing = pipeline.policy.scheduling.nri_requirements()
        have = (runtime.nri_version.major, runtime.nri_version.minor, runtime.nri_version.patch)
        lacking = [r for r in missing if have < r.since]
        needs = [f for c in pipeline.controllers for f in c.nri_requirements() if have < f.since]
        if lacking or needs:
            sets = "; ".join(r.describe() for r in lacking)
            parts = [f"policy {pipeline.policy.name} sets {sets}"] if lacking else []
            remove = ["the scheduling classes"] if lacking else []
            parts += [f.describe() for f in needs]
            remove += [f.wanted_by for f in needs]
            raise ConfigError(
                "configuration: "
                + "; ".join(parts)
                + f"; expected a runtime whose NRI release has them, found {runtime.name} "
                f"{runtime.version} with NRI {runtime.nri_version} "
                f"({runtime.nri_version_source}), which would drop them silently. Remove "
                + " and ".join(remove)
                + " or upgrade the runtime"
            )

    def rdt_samples(self) -> list[MonSample]:
        """RDT monitoring counters read now, for /metrics (see `Controller.
        monitoring_samples`); empty without RDT monitoring."""
        containers = [(str(i.id), a.rdt_class if a else None) for i, a in self.pipeline.snapshot()]
        read = best_effort(
            self.pipeline.controllers,
            lambda ctl: ctl.monitoring_samples(containers),
            log=self.rlog,
            failed="RDT counters not read",
        )
        return [sample for samples in read for sample in samples]

    # -- plumbing --------------------------------------------------------------------

    def _route_logs(self, config: Config) -> None:
        """Log where `config` says from now on (a pre-registered plugin's log file)."""
        old = self.log_handle
        self.log_handle = configure_logging(config.log)
        route_stdlib_logging(config.log)
        if old is not None:
            old.close()
        self.rlog = get_logger("daemon")

    async def _handle(self, event: str, fn: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        error: str | None = None
        async with self.lock:
            try:
                with collector.handling(self._after_reply):
                    result = fn()
                if self.reassert_pending and event != "Synchronize":
                    with contextlib.suppress(ConnectionClosed):
                        await self._reassert()
                return result
            except ResmgrError as exc:
                error = type(exc).__name__
                self.rlog.warning("event failed", nri_event=event, error=str(exc))
                raise RPCError(StatusCode.UNKNOWN, str(exc)) from exc
            except RPCError:
                error = "RPCError"
                raise
            except Exception as exc:
                error = "internal"
                self.rlog.exception("event failed: internal error", nri_event=event)
                raise RPCError(
                    StatusCode.INTERNAL, f"nri-resmgr internal error in {event}: {exc!r}"
                ) from exc
            finally:
                self.metrics.observe_event(event, time.perf_counter() - start, error=error)

    def state_snapshot(self) -> StateSnapshot:
        """Pools, containers and balloons as the metrics and the node report show them
        (`nri_resmgr.ops.metrics.state_snapshot`)."""
        pipeline = self.pipeline
        assignments = (a for _info, a in pipeline.snapshot())
        return state_snapshot(assignments, pipeline.policy, pipeline.state)

    def apply_config(self, config: Config) -> list[api.ContainerUpdate]:
        """Live reload: a pipeline for `config` takes over every live container.

        Synchronous, for `config_source.LiveConfig(apply=...)`; call it on the event loop
        between events (or use `reconfigure`).  Returns the updates of the containers the
        new configuration moves; the caller sends them with `update_containers`.  Raises
        `ResmgrError` when the configuration cannot be applied; nothing changes then.
        """
        pipeline = self._build(config)
        self._check_runtime_fields(pipeline, self.runtime)
        updates = pipeline.adopt(self.pipeline)
        if config.log != self.config.log:
            self._route_logs(config)
        self.config, self.pipeline = config, pipeline
        self.rlog.info("configuration applied", policy=config.policy, moved=len(updates))
        return updates

    async def reconfigure(self, config: Config) -> list[api.ContainerUpdate]:
        """`apply_config` between events, then send the updates to the runtime (if
        connected); returns the updates the runtime reported as failed."""
        async with self.lock:
            updates = self.apply_config(config)
        if not updates:
            return []
        try:
            return await self.update_containers(updates) or []
        except ConnectionClosed:
            # the next Synchronize places every container under the new configuration
            self.rlog.info("not connected: updates left to the next Synchronize")
            return []

    def updates_failed(self, updates: Sequence[api.ContainerUpdate], error: BaseException) -> None:
        """An unsolicited update got no answer: re-assert those containers at the next
        event, at most `MAX_REASSERTS` times each (a reconnect's Synchronize does the rest)."""
        for u in updates:
            cid = ContainerID(u.container_id)
            tries = self._reasserted.pop(cid, 0) + 1
            if tries > MAX_REASSERTS:
                self.reassert_pending.pop(cid, None)
                self.rlog.warning(
                    "update not confirmed; giving up until the next Synchronize",
                    id=cid,
                    attempts=tries,
                    error=str(error) or type(error).__name__,
                )
            else:
                self.reassert_pending[cid] = tries

    async def _reassert(self) -> None:
        """Send again the current placement of the containers whose update failed."""
        pending, self.reassert_pending = self.reassert_pending, {}
        updates = self.pipeline.reassert(pending)
        self._reasserted = {
            ContainerID(u.container_id): pending[ContainerID(u.container_id)] for u in updates
        }
        self.rlog.info(
            "re-asserting placements after a failed update",
            count=len(updates),
            ids=",".join(sorted(self._reasserted)),
        )
        if updates:
            await self.update_containers(updates, timeout=self.update_timeout)

    async def _send_later(self, updates: Sequence[api.ContainerUpdate], why: str) -> None:
        if not updates:
            return
        self.rlog.info("unsolicited updates queued", count=len(updates), reason=why)
        await self.update_containers(updates, timeout=self.update_timeout)

    # -- hooks -----------------------------------------------------------------------

    def configure(self, config: str, runtime: RuntimeInfo) -> None:
        self.health.registered = True
        self.health.synchronized = False
        self.health.reason = "waiting for Synchronize"
        if self.pre_registered and runtime.nri_version < NO_PREREGISTERED_SYNC_BEFORE:
            # these runtimes never synchronize pre-registered plugins: events come next
            self.health.synchronized = True
            self.health.reason = ""
        self.rlog.info(
            "configure",
            runtime=f"{runtime.name} {runtime.version}",
            nri_version=str(runtime.nri_version),
            config_bytes=len(config),
        )
        if not config.strip():
            try:
                self._check_runtime_fields(self.pipeline, runtime)
            except ResmgrError as exc:
                self.rlog.error("configuration not supported by the runtime", error=str(exc))
                raise RPCError(StatusCode.INVALID_ARGUMENT, str(exc)) from exc
        else:
            try:
                new = load_config(config)
                pipeline = self._build(new)
                self._check_runtime_fields(pipeline, runtime)
            except ResmgrError as exc:
                self.metrics.count_config_reload("error")
                self.rlog.error("configuration from the runtime rejected", error=str(exc))
                raise RPCError(StatusCode.INVALID_ARGUMENT, str(exc)) from exc
            if new.log != self.config.log:
                self._route_logs(new)
            self.pipeline.flush_records()
            self.config = new
            self.pipeline = pipeline
            log_config_warnings(new.warnings, source="the runtime's configuration")
            self.metrics.count_config_reload("ok")
            self.rlog.info("configuration from the runtime applied", policy=new.policy)
        return None

    async def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> list[api.ContainerUpdate]:
        self.reassert_pending.clear()
        self._reasserted.clear()
        if self.kubelet_devices is not None:
            await self.kubelet_devices.refresh()
        updates: list[api.ContainerUpdate] = await self._handle(
            "Synchronize", lambda: self._synchronized(pods, containers)
        )
        self.health.synchronized = True
        self.health.reason = ""
        for update in updates:  # fresh messages; best effort (module docstring, Restarts)
            update.ignore_failure = True
        return updates

    def _synchronized(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> list[api.ContainerUpdate]:
        """The pipeline's Synchronize, the collector off (`ops.collector.building`)."""
        with collector.building():
            return self.pipeline.synchronize(pods, containers)

    def connect_failed(self, error: OSError, attempt: int) -> None:
        if attempt % HINT_EVERY != 1 or self.pre_registered:
            return
        if isinstance(error, FileNotFoundError):
            self.rlog.warning(
                "the NRI socket does not exist; usually NRI is not enabled in the runtime. "
                "See what enabling it would change with: "
                "nri-resmgr enable-nri --runtime containerd --dry-run",
                socket=self.socket_path,
                attempt=attempt,
            )
        else:
            self.rlog.warning(
                "cannot connect to the NRI socket; is the runtime running with NRI enabled?",
                socket=self.socket_path,
                error=str(error),
                attempt=attempt,
            )

    def close(self) -> None:
        """The daemon stops: controllers put back what must not outlive it (CPU class
        files and interrupt affinities get their originals)."""
        self.pipeline.close()

    def on_close(self) -> None:
        self.health.registered = False
        self.health.synchronized = False
        self.health.reason = "connection to the runtime lost"
        # the stub has logged the loss with its reason (one line per loss, not two)

    async def run_pod_sandbox(self, pod: api.PodSandbox) -> None:
        if self.kubelet_devices is not None:
            self.kubelet_devices.prefetch(pod.namespace, pod.name)
        await self._handle("RunPodSandbox", lambda: self.pipeline.run_pod(pod))

    async def remove_pod_sandbox(self, pod: api.PodSandbox) -> None:
        if self.kubelet_devices is not None:
            self.kubelet_devices.forget(pod.namespace, pod.name)
        updates = await self._handle("RemovePodSandbox", lambda: self.pipeline.remove_pod(pod))
        await self._send_later(updates, f"pod {pod.namespace}/{pod.name} removed")

    async def create_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> tuple[api.ContainerAdjustment, list[api.ContainerUpdate]]:
        hints: tuple[TopologyHint, ...] = ()
        if self.kubelet_devices is not None:
            hints = await self.kubelet_devices.hints(pod.namespace, pod.name, container.name)
        try:
            result: tuple[api.ContainerAdjustment, list[api.ContainerUpdate]] = await self._handle(
                "CreateContainer", lambda: self.pipeline.create(pod, container, hints)
            )
        except RPCError as exc:  # issue 27: a refusal is an event on the pod
            ref = PodRef(namespace=pod.namespace, name=pod.name, uid=pod.uid)
            self.pod_events.offer(refusal_note(ref, container.name, exc.message), time.monotonic())
            raise
        return result

    async def post_start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        updates = await self._handle(
            "PostStartContainer", lambda: self.pipeline.started(pod, container)
        )
        await self._send_later(updates, f"container {container.name} started")

    async def update_container(
        self, pod: api.PodSandbox, container: api.Container, resources: api.LinuxResources
    ) -> list[api.ContainerUpdate]:
        updates: list[api.ContainerUpdate] = await self._handle(
            "UpdateContainer", lambda: self.pipeline.update(pod, container, resources)
        )
        return updates

    async def stop_container(
        self, pod: api.PodSandbox, container: api.Container
    ) -> list[api.ContainerUpdate]:
        updates: list[api.ContainerUpdate] = await self._handle(
            "StopContainer", lambda: self.pipeline.stop(pod, container)
        )
        return updates

    async def remove_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        updates = await self._handle(
            "RemoveContainer", lambda: self.pipeline.remove(pod, container)
        )
        await self._send_later(updates, f"container {container.name} removed")
