"""The kubelet and containerd in miniature: a scenario's steps as NRI messages to a real
`Pipeline`, and the runtime's side of what comes back.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nri_api import api
from nri_resmgr.control.irq import IrqFiles
from nri_resmgr.kube.nrt import node_fields
from nri_resmgr.kube.policy_view import read_node_use
from nri_resmgr.model import QoSClass, ResmgrError
from nri_resmgr.ops.metrics import balloon_snapshots
from nri_resmgr.policy.base import Policy
from nri_resmgr.runtime import adapter
from nri_resmgr.runtime.pipeline import ClassSelector, Controller, Pipeline
from nri_resmgr.simulator.results import ContainerReport, StepResult
from nri_resmgr.simulator.scenario import (
    MIN_QUOTA,
    QUOTA_PERIOD,
    ContainerSpec,
    DeleteSpec,
    PodSpec,
    ScenarioError,
    Step,
    SynchronizeSpec,
    UpdateSpec,
    parse_cpu,
    parse_memory,
)
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology

# ---- kubelet + containerd, in miniature ----------------------------------------------


def _hexid(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:32]


@dataclass(slots=True)
class _SimPod:
    sandbox: api.PodSandbox
    qos: QoSClass
    spec: PodSpec
    #: app containers by name, in creation order
    containers: dict[str, api.Container] = field(default_factory=dict)


def _effective(c: ContainerSpec) -> tuple[int | None, int | None, int | None, int | None]:
    """(cpu request, cpu limit, memory request, memory limit) after API defaulting."""
    what = f"container {c.name}"
    cpu_lim = (
        parse_cpu(c.limits.cpu, what=f"{what} limits.cpu") if c.limits.cpu is not None else None
    )
    mem_lim = (
        parse_memory(c.limits.memory, what=f"{what} limits.memory")
        if c.limits.memory is not None
        else None
    )
    cpu_req = (
        parse_cpu(c.requests.cpu, what=f"{what} requests.cpu")
        if c.requests.cpu is not None
        else cpu_lim
    )
    mem_req = (
        parse_memory(c.requests.memory, what=f"{what} requests.memory")
        if c.requests.memory is not None
        else mem_lim
    )
    return cpu_req, cpu_lim, mem_req, mem_lim


def pod_qos(spec: PodSpec) -> QoSClass:
    """The pod's QoS class by Kubernetes' rules (init containers included)."""
    all_c = list(spec.init_containers) + list(spec.containers)
    eff = [_effective(c) for c in all_c]
    if all(v is None for e in eff for v in e):
        return QoSClass.BEST_EFFORT
    guaranteed = all(
        cl is not None and ml is not None and cr == cl and mr == ml for cr, cl, mr, ml in eff
    )
    return QoSClass.GUARANTEED if guaranteed else QoSClass.BURSTABLE


def _cgroup_parent(driver: str, qos: QoSClass, uid: str) -> str:
    word = {
        QoSClass.GUARANTEED: "",
        QoSClass.BURSTABLE: "burstable",
        QoSClass.BEST_EFFORT: "besteffort",
    }[qos]
    if driver == "systemd":
        mid = f"-{word}" if word else ""
        return f"kubepods{mid}-pod{uid.replace('-', '_')}.slice"
    mid = f"/{word}" if word else ""
    return f"/kubepods{mid}/pod{uid}"


def container_resources(c: ContainerSpec | UpdateSpec) -> api.LinuxResources:
    """The LinuxResources the kubelet computes for a container spec."""
    spec = (
        c
        if isinstance(c, ContainerSpec)
        else ContainerSpec(name=c.container, requests=c.requests, limits=c.limits)
    )
    cpu_req, cpu_lim, _mem_req, mem_lim = _effective(spec)
    res = api.LinuxResources()
    res.cpu.shares.value = max(2, (cpu_req or 0) * 1024 // 1000)
    res.cpu.shares.SetInParent()
    if cpu_lim is not None:
        res.cpu.quota.value = max(MIN_QUOTA, cpu_lim * QUOTA_PERIOD // 1000)
        res.cpu.quota.SetInParent()
        res.cpu.period.value = QUOTA_PERIOD
        res.cpu.period.SetInParent()
    if mem_lim is not None:
        res.memory.limit.value = mem_lim
        res.memory.limit.SetInParent()
    return res


class Simulator:
    """A miniature kubelet + containerd around one `Pipeline` (module docstring)."""

    def __init__(
        self,
        *,
        policy: Policy,
        cgroup_driver: str = "systemd",
        controllers: Sequence[Controller] = (),
        select_classes: ClassSelector | None = None,
        cgroup_root: str | None = None,
        log: Any = None,
        irq_files: IrqFiles | None = None,
        topology: Topology | None = None,
    ) -> None:
        self.policy = policy
        #: the machine, for the NodeResourceTopology of each step (None: not reported)
        self.topology = topology
        #: interrupt affinities written by the controllers, read back after every step
        self.irq_files = irq_files
        self.cgroup_root = cgroup_root
        self.driver = cgroup_driver
        self.controllers = tuple(controllers)
        self.select_classes = select_classes
        self.log = log
        self.pipeline = self._new_pipeline()
        self.pods: dict[str, _SimPod] = {}
        #: every live container by id: (pod name, container message)
        self.live: dict[str, tuple[str, api.Container]] = {}
        self.counter = 0

    def _new_pipeline(self) -> Pipeline:
        return Pipeline(
            self.policy,
            controllers=self.controllers,
            select_classes=self.select_classes,
            log=self.log,
        )

    # -- the runtime side: apply what the plugin answers --------------------------------

    def _apply_updates(self, updates: Sequence[api.ContainerUpdate], seen: dict[str, str]) -> None:
        for u in updates:
            entry = self.live.get(u.container_id)
            if entry is None:
                continue
            pod, c = entry
            res = u.linux.resources
            if res.cpu.cpus:
                c.linux.resources.cpu.cpus = res.cpu.cpus
            if res.cpu.mems:
                c.linux.resources.cpu.mems = res.cpu.mems
            seen[f"{pod}/{c.name}"] = c.linux.resources.cpu.cpus

    def _new_container(self, pod: _SimPod, spec: ContainerSpec) -> api.Container:
        self.counter += 1
        cid = _hexid("container", pod.sandbox.id, spec.name, str(self.counter))
        c = api.Container(
            id=cid,
            pod_sandbox_id=pod.sandbox.id,
            name=spec.name,
            state=api.ContainerState.CONTAINER_CREATED,
        )
        c.labels.update(
            {
                "io.kubernetes.container.name": spec.name,
                "io.kubernetes.pod.name": pod.sandbox.name,
                "io.kubernetes.pod.namespace": pod.sandbox.namespace,
                "io.kubernetes.pod.uid": pod.sandbox.uid,
            }
        )
        c.annotations.update(
            {
                "io.kubernetes.container.hash": _hexid("hash", spec.name)[:8],
                "io.kubernetes.container.restartCount": "0",
                "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
                "io.kubernetes.container.terminationMessagePolicy": "File",
                "io.kubernetes.pod.terminationGracePeriod": "30",
            }
        )
        parent = pod.sandbox.linux.cgroup_parent
        c.linux.cgroups_path = (
            f"{parent}:cri-containerd:{cid}" if self.driver == "systemd" else f"{parent}/{cid}"
        )
        c.linux.resources.CopyFrom(container_resources(spec))
        return c

    def _create_one(
        self, pod: _SimPod, spec: ContainerSpec, errors: list[str], seen: dict[str, str]
    ) -> api.Container | None:
        c = self._new_container(pod, spec)
        try:
            adjust, updates = self.pipeline.create(pod.sandbox, c)
        except ResmgrError as exc:
            errors.append(f"{pod.spec.pod}/{spec.name}: {exc}")
            return None
        res = adjust.linux.resources
        if res.cpu.cpus:
            c.linux.resources.cpu.cpus = res.cpu.cpus
        if res.cpu.mems:
            c.linux.resources.cpu.mems = res.cpu.mems
        if res.HasField("rdt_class"):
            c.linux.resources.rdt_class.CopyFrom(res.rdt_class)
        if res.HasField("blockio_class"):
            c.linux.resources.blockio_class.CopyFrom(res.blockio_class)
        self.live[c.id] = (pod.spec.pod, c)
        self._apply_updates(updates, seen)
        self._make_cgroup(c)
        c.state = api.ContainerState.CONTAINER_RUNNING
        try:
            self._apply_updates(self.pipeline.started(pod.sandbox, c), seen)
        except ResmgrError as exc:  # the runtime only logs PostStartContainer failures
            errors.append(f"{pod.spec.pod}/{spec.name}: post-start: {exc}")
        return c

    def _make_cgroup(self, c: api.Container) -> None:
        """What runc and the kernel do: the container's cgroup with its io files."""
        if self.cgroup_root is None:
            return
        from nri_resmgr.control.blockio import (
            V1_THROTTLE_FILES,
            CgroupVersion,
            cgroup_relpath,
            detect_version,
        )

        version, root = detect_version(Path(self.cgroup_root))
        directory = root.joinpath(*cgroup_relpath(c.linux.cgroups_path))
        directory.mkdir(parents=True, exist_ok=True)
        if version is CgroupVersion.V2:
            files = ["io.weight", "io.max"]
        else:
            files = ["blkio.weight", "blkio.weight_device"] + [f for _, f in V1_THROTTLE_FILES]
        for name in files:
            (directory / name).touch()

    def _stop_remove(self, pod: _SimPod, c: api.Container, seen: dict[str, str]) -> None:
        c.state = api.ContainerState.CONTAINER_STOPPED
        self._apply_updates(self.pipeline.stop(pod.sandbox, c), seen)
        self.live.pop(c.id, None)
        self._apply_updates(self.pipeline.remove(pod.sandbox, c), seen)

    # -- steps ----------------------------------------------------------------------------

    def _pod(self, spec: PodSpec, qos: QoSClass) -> _SimPod:
        """The sandbox the kubelet makes for `spec`."""
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{spec.namespace}/{spec.pod}/{self.counter}"))
        sandbox = api.PodSandbox(
            id=_hexid("sandbox", spec.namespace, spec.pod, str(self.counter)),
            name=spec.pod,
            uid=uid,
            namespace=spec.namespace,
        )
        sandbox.labels.update(spec.labels)
        sandbox.labels.update(
            {
                "io.kubernetes.pod.name": spec.pod,
                "io.kubernetes.pod.namespace": spec.namespace,
                "io.kubernetes.pod.uid": uid,
            }
        )
        sandbox.annotations.update(spec.annotations)
        if spec.init_containers:
            sandbox.annotations[adapter.INIT_CONTAINERS_ANNOTATION] = ",".join(
                c.name for c in spec.init_containers
            )
        sandbox.linux.cgroup_parent = _cgroup_parent(self.driver, qos, uid)
        return _SimPod(sandbox=sandbox, qos=qos, spec=spec)

    def create(self, spec: PodSpec) -> tuple[list[str], dict[str, str]]:
        errors: list[str] = []
        seen: dict[str, str] = {}
        if spec.pod in self.pods:
            raise ScenarioError(f"create: pod {spec.pod!r} exists already; delete it first")
        pod = self._pod(spec, pod_qos(spec))
        sandbox = pod.sandbox
        try:
            self.pipeline.run_pod(sandbox)
        except ResmgrError as exc:
            errors.append(f"{spec.pod}: {exc}")
            return errors, seen
        self.pods[spec.pod] = pod
        for init in spec.init_containers:
            c = self._create_one(pod, init, errors, seen)
            if c is None:
                # the kubelet would retry the init container forever; app containers wait
                return errors, seen
            self._stop_remove(pod, c, seen)
        for app in spec.containers:
            c = self._create_one(pod, app, errors, seen)
            if c is not None:
                pod.containers[app.name] = c
        return errors, seen

    def delete(self, spec: DeleteSpec) -> tuple[list[str], dict[str, str]]:
        seen: dict[str, str] = {}
        pod = self.pods.pop(spec.pod, None)
        if pod is None:
            raise ScenarioError(f"delete: no pod {spec.pod!r}; expected one of {sorted(self.pods)}")
        for c in list(pod.containers.values()):
            self._stop_remove(pod, c, seen)
        self._apply_updates(self.pipeline.remove_pod(pod.sandbox), seen)
        return [], seen

    def update(self, spec: UpdateSpec) -> tuple[list[str], dict[str, str]]:
        seen: dict[str, str] = {}
        pod = self.pods.get(spec.pod)
        c = pod.containers.get(spec.container) if pod is not None else None
        if pod is None or c is None:
            raise ScenarioError(f"update: no container {spec.pod}/{spec.container}")
        res = container_resources(spec)
        try:
            updates = self.pipeline.update(pod.sandbox, c, res)
        except ResmgrError as exc:
            return [f"{spec.pod}/{spec.container}: {exc}"], seen
        keep_cpus, keep_mems = c.linux.resources.cpu.cpus, c.linux.resources.cpu.mems
        c.linux.resources.CopyFrom(res)
        c.linux.resources.cpu.cpus, c.linux.resources.cpu.mems = keep_cpus, keep_mems
        self._apply_updates(updates, seen)
        return [], seen

    def restart(self) -> tuple[list[str], dict[str, str]]:
        seen: dict[str, str] = {}
        self.pipeline = self._new_pipeline()
        sandboxes = [p.sandbox for p in self.pods.values()]
        containers = [c for _, c in self.live.values()]
        self._apply_updates(self.pipeline.synchronize(sandboxes, containers), seen)
        return [], seen

    def synchronize(
        self, spec: SynchronizeSpec
    ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """The pods of `spec` are running with their placements; the plugin restarts and
        synchronizes every live container (as `restart`).  Also returns, per container of
        `spec` the synchronization moved, ``cpus A -> B`` and ``mems X -> Y`` (what a
        what-if of a new configuration over a dump lists)."""
        before: dict[str, tuple[str, str]] = {}
        for pod_spec in spec.pods:
            if pod_spec.pod in self.pods:
                raise ScenarioError(
                    f"synchronize: pod {pod_spec.pod!r} exists already; delete it first"
                )
            pod = self._pod(pod_spec, pod_spec.qos or pod_qos(pod_spec))
            self.pods[pod_spec.pod] = pod
            for cspec in pod_spec.containers:
                c = self._new_container(pod, cspec)
                c.linux.resources.cpu.cpus = cspec.cpus
                c.linux.resources.cpu.mems = cspec.mems
                c.state = api.ContainerState.CONTAINER_RUNNING
                pod.containers[cspec.name] = c
                self.live[c.id] = (pod_spec.pod, c)
                before[f"{pod_spec.pod}/{cspec.name}"] = (cspec.cpus, cspec.mems)
        errors, seen = self.restart()
        moved = {}
        for key, r in self.report().items():
            if key not in before:
                continue
            was_cpus, was_mems = before[key]
            parts = []
            if IDSet.parse(was_cpus) != IDSet.parse(r.cpus):
                parts.append(f"cpus {was_cpus or '-'} -> {r.cpus or '-'}")
            if IDSet.parse(was_mems) != IDSet.parse(r.mems):
                parts.append(f"mems {was_mems or '-'} -> {r.mems or '-'}")
            if parts:
                moved[key] = ", ".join(parts)
        return errors, seen, moved

    def report(self) -> dict[str, ContainerReport]:
        out: dict[str, ContainerReport] = {}
        for info, a in self.pipeline.snapshot():
            key = f"{info.pod.name}/{info.name}"
            if a is None:
                out[key] = ContainerReport("", "", "", "", None, None)
            else:
                out[key] = ContainerReport(
                    cpus=str(a.cpus),
                    mems=str(a.mems),
                    kind=str(a.kind),
                    pool=a.pool,
                    rdt_class=a.rdt_class,
                    blockio_class=a.blockio_class,
                )
        return out

    def run_step(self, index: int, step: Step) -> StepResult:
        pod: str | None = None
        moved: dict[str, str] = {}
        if step.create is not None:
            pod = step.create.pod
            errors, seen = self.create(step.create)
        elif step.delete is not None:
            pod = step.delete.pod
            errors, seen = self.delete(step.delete)
        elif step.update is not None:
            pod = step.update.pod
            errors, seen = self.update(step.update)
        elif step.synchronize is not None:
            errors, seen, moved = self.synchronize(step.synchronize)
        else:
            errors, seen = self.restart()
        return StepResult(
            step=index,
            op=step.op,
            pod=pod,
            errors=tuple(errors),
            updates=dict(sorted(seen.items())),
            containers=self.report(),
            balloons=balloon_snapshots(
                self.pipeline.policy,
                self.pipeline.state,
                names={
                    info.id: f"{info.pod.name}/{info.name}" for info, _ in self.pipeline.snapshot()
                },
            ),
            irqs=(
                {n: str(c) for n, c in self.irq_files.current().items()}
                if self.irq_files is not None
                else {}
            ),
            cpu_classes=self._cpu_classes(),
            moved=dict(sorted(moved.items())),
            nrt=self._nrt(),
        )

    def _nrt(self) -> dict[str, Any]:
        """The NodeResourceTopology fields (zones, attributes) the daemon would report now."""
        if self.topology is None:
            return {}
        p = self.pipeline
        use = read_node_use(self.topology, p.policy, p.state, p.snapshot(), pods=p.pods.values())
        return node_fields(self.topology, use)

    def _cpu_classes(self) -> dict[str, str]:
        """CPU class -> its CPUs, for policies that name CPU classes."""
        return self.pipeline.policy.cpu_class_use(self.pipeline.state).to_json()
