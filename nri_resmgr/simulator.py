"""The simulator: drive the real adapter, pipeline and policy with kubelet-shaped events.

Theory of operation
-------------------
A scenario is a topology, a policy with its configuration, and a list of steps.  The
simulator plays the part of the kubelet and containerd: for each step it builds the NRI
messages those two would build, hands them to a real `Pipeline` (the same object the
daemon uses, with the real adapter and policy behind it) and applies what comes back the
way the runtime would: an adjustment sets the new container's cpuset, an update changes
another container's.  After each step it reports every live container.

How a pod becomes NRI messages (what the kubelet computes and containerd passes on):

* requests default to limits (API defaulting); the pod's QoS class is Guaranteed when
  every container has CPU and memory limits equal to its requests, BestEffort when no
  container asks for anything, Burstable otherwise;
* the sandbox's cgroup parent encodes the QoS class (``kubepods-burstable-pod<uid>.slice``
  for the systemd driver, ``/kubepods/burstable/pod<uid>`` for cgroupfs; Guaranteed pods
  have no class component);
* each container gets CFS shares ``max(2, milli * 1024 / 1000)`` from its CPU request,
  quota ``milli * 100`` with period 100000 from its CPU limit, and a memory limit;
* pod annotations are the pod's; init containers are listed in the pod annotation
  ``init-containers.resource-policy.nri.io`` (see `nri_resmgr.adapter`: the real kubelet
  marks nothing);
* ids are deterministic (hashes of names and a counter), so outputs can be compared.

Steps:

* ``create``: RunPodSandbox; each init container in turn is created, started, stopped and
  removed; then the app containers are created and started.  A failed creation (e.g.
  overcommit) is reported in the step's ``errors`` and that container is skipped;
* ``delete``: the pod's containers are stopped and removed, then the sandbox;
* ``update``: a container's resources change (in-place resize: UpdateContainer);
* ``restart``: the daemon restarts: a fresh pipeline is synchronized with the containers
  as the runtime reports them (their current cpusets), which shows which placements are
  kept and which are moved.

Bounds: a scenario file is read through `nri_resmgr.documents` (size, depth, numbers);
then at most `MAX_STEPS` steps, `MAX_CONTAINERS` containers created, `MAX_RESTARTS`
restarts and `MAX_ROWS` container rows over all reports, and quantities of at most
`MAX_CPU_MILLI` and `MAX_MEMORY`; beyond them the scenario is refused with a
`ScenarioError` before any step runs, so no scenario costs more than seconds.

Everything here is deterministic and in memory, except the optional RDT and block I/O
controllers, which write under the directories given to them.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from nri_api import api
from nri_resmgr import adapter
from nri_resmgr.config import (
    Config,
    config_from_mapping,
    format_validation_error,
    policy_config_problems,
    short_repr,
)
from nri_resmgr.documents import DocumentError, load_document
from nri_resmgr.model import ConfigError, QoSClass, ResmgrError
from nri_resmgr.pipeline import ClassSelector, Controller, Pipeline
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy_registry import load_policy
from nri_resmgr.topology.cpuset import MAX_ID
from nri_resmgr.topology.load import load_topology, path_kind
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.render import summarize

__all__ = [
    "ContainerSpec",
    "PodSpec",
    "Scenario",
    "SimulationResult",
    "Simulator",
    "StepResult",
    "load_scenario",
    "parse_cpu",
    "parse_memory",
    "render_json",
    "render_table",
    "run_scenario",
]

_CPU_RE = re.compile(r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*(m?)\s*$")
_MEM_RE = re.compile(r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*([KMGTPE]i?|k)?\s*$")
_MEM_UNITS = {
    None: 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "Ei": 1 << 60,
}
QUOTA_PERIOD = 100_000
MIN_QUOTA = 1000

# Bounds on a scenario (docs/simulator.md).  They keep any scenario, mistaken or hostile,
# to seconds and tens of megabytes: every step reports every live container, so the
# output grows as steps times containers.
#: steps in one scenario
MAX_STEPS = 1000
#: containers (init containers included) created over the whole scenario
MAX_CONTAINERS = 256
#: restart steps (each synchronizes every live container anew)
MAX_RESTARTS = 100
#: container rows over all steps' reports (each step reports every live container)
MAX_ROWS = 10_000
#: a CPU quantity, in millicores: the most CPUs a machine model can have
MAX_CPU_MILLI = (MAX_ID + 1) * 1000
#: a memory quantity, in bytes (NRI carries it as int64)
MAX_MEMORY = (1 << 63) - 1


class ScenarioError(ConfigError):
    """A scenario that cannot be run (bad document, unknown pod, bad quantity)."""


def parse_cpu(value: str | int | float, *, what: str) -> int:
    """A Kubernetes CPU quantity (``500m``, ``1``, ``1.5``) in millicores."""
    m = _CPU_RE.match(str(value))
    if m is None:
        shown = short_repr(value)
        raise ScenarioError(f"{what}: expected a CPU quantity like 500m, 1 or 1.5, found {shown}")
    number = float(m.group(1))
    milli = int(number) if m.group(2) else round(number * 1000)
    if milli > MAX_CPU_MILLI:
        raise ScenarioError(
            f"{what}: expected at most {MAX_CPU_MILLI // 1000} CPUs, found {short_repr(value)}"
        )
    return milli


def parse_memory(value: str | int, *, what: str) -> int:
    """A Kubernetes memory quantity (``100M``, ``1Gi``, ``1024``) in bytes."""
    m = _MEM_RE.match(str(value))
    if m is None:
        raise ScenarioError(
            f"{what}: expected a memory quantity like 100M, 1Gi or 1048576, found "
            f"{short_repr(value)}"
        )
    amount = int(float(m.group(1)) * _MEM_UNITS[m.group(2)])
    if amount > MAX_MEMORY:
        raise ScenarioError(
            f"{what}: expected at most {MAX_MEMORY} bytes (2**63-1), found {short_repr(value)}"
        )
    return amount


# ---- the scenario document --------------------------------------------------------------


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Resources(_Doc):
    cpu: str | int | float | None = None
    memory: str | int | None = None


class ContainerSpec(_Doc):
    name: str
    requests: Resources = Field(default_factory=Resources)
    limits: Resources = Field(default_factory=Resources)


class PodSpec(_Doc):
    pod: str
    namespace: str = "default"
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    init_containers: tuple[ContainerSpec, ...] = ()
    containers: tuple[ContainerSpec, ...] = ()


class DeleteSpec(_Doc):
    pod: str


class UpdateSpec(_Doc):
    pod: str
    container: str
    requests: Resources = Field(default_factory=Resources)
    limits: Resources = Field(default_factory=Resources)


class RestartSpec(_Doc):
    pass


class Step(_Doc):
    create: PodSpec | None = None
    delete: DeleteSpec | None = None
    update: UpdateSpec | None = None
    restart: RestartSpec | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Step:
        ops = [k for k in ("create", "delete", "update", "restart") if getattr(self, k) is not None]
        if len(ops) != 1:
            raise ValueError(
                f"expected exactly one of create, delete, update, restart; found {ops or 'none'}"
            )
        return self

    @property
    def op(self) -> str:
        for k in ("create", "delete", "update", "restart"):
            if getattr(self, k) is not None:
                return k
        raise AssertionError("unreachable")


class Scenario(_Doc):
    description: str = ""
    topology: str | dict[str, Any] | None = None
    policy: str | None = None
    #: the policy's configuration (the daemon config's ``policyConfig``)
    config: dict[str, Any] = Field(default_factory=dict)
    #: the daemon config's ``control`` section (RDT and block I/O)
    control: dict[str, Any] = Field(default_factory=dict)
    cgroup_driver: Literal["systemd", "cgroupfs"] = Field(default="systemd", alias="cgroupDriver")
    steps: tuple[Step, ...] = ()
    #: directory relative topology paths are resolved against
    base_dir: str = ""

    @field_validator("steps", mode="before")
    @classmethod
    def _few_steps(cls, value: Any) -> Any:
        if isinstance(value, list | tuple) and len(value) > MAX_STEPS:
            raise ValueError(f"expected at most {MAX_STEPS} steps, found {len(value)}")
        return value

    @model_validator(mode="after")
    def _few_containers(self) -> Scenario:
        count = sum(
            len(s.create.init_containers) + len(s.create.containers)
            for s in self.steps
            if s.create is not None
        )
        if count > MAX_CONTAINERS:
            raise ValueError(
                f"steps: expected at most {MAX_CONTAINERS} containers created over the "
                f"scenario, found {count}"
            )
        live: dict[str, int] = {}
        rows = 0
        for s in self.steps:
            if s.create is not None:
                live[s.create.pod] = len(s.create.containers)
            elif s.delete is not None:
                live.pop(s.delete.pod, None)
            rows += sum(live.values())
        if rows > MAX_ROWS:
            raise ValueError(
                f"steps: expected at most {MAX_ROWS} container rows over all steps' reports "
                f"(each step reports every live container), found {rows}"
            )
        restarts = sum(1 for s in self.steps if s.restart is not None)
        if restarts > MAX_RESTARTS:
            raise ValueError(
                f"steps: expected at most {MAX_RESTARTS} restart steps, found {restarts}"
            )
        return self


def load_scenario(source: Path | str | Mapping[str, Any]) -> Scenario:
    """A `Scenario` from a YAML/JSON file or an already parsed mapping."""
    name = "<scenario>"
    base = ""
    if isinstance(source, Mapping):
        data: Any = dict(source)
    else:
        path = Path(source)
        name, base = str(path), str(path.parent)
        try:
            data = load_document(path)
        except DocumentError as exc:
            raise ScenarioError(str(exc)) from exc
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{name}: expected a mapping, found {type(data).__name__}")
    data = dict(data)
    data.setdefault("base_dir", base)
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{name}: {format_validation_error(exc, model=Scenario)}") from exc


# ---- results --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerReport:
    cpus: str
    mems: str
    kind: str
    pool: str
    rdt_class: str | None
    blockio_class: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpus": self.cpus,
            "mems": self.mems,
            "kind": self.kind,
            "pool": self.pool,
            "rdt_class": self.rdt_class,
            "blockio_class": self.blockio_class,
        }


@dataclass(frozen=True, slots=True)
class StepResult:
    step: int
    op: str
    pod: str | None
    errors: tuple[str, ...]
    #: containers (pod/name) that received an update during this step, with the new cpus
    updates: Mapping[str, str]
    containers: Mapping[str, ContainerReport]

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "op": self.op,
            "pod": self.pod,
            "errors": list(self.errors),
            "updates": dict(self.updates),
            "containers": {k: v.as_dict() for k, v in self.containers.items()},
        }


@dataclass(frozen=True, slots=True)
class SimulationResult:
    #: where the topology came from (a shipped machine's name, a path, ``spec:...``)
    topology: str
    policy: str
    steps: tuple[StepResult, ...]
    #: its size, `nri_resmgr.topology.render.summarize`
    machine: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "topology": self.topology,
            "machine": self.machine,
            "policy": self.policy,
            "steps": [s.as_dict() for s in self.steps],
        }


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
    ) -> None:
        self.policy = policy
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

    def create(self, spec: PodSpec) -> tuple[list[str], dict[str, str]]:
        errors: list[str] = []
        seen: dict[str, str] = {}
        if spec.pod in self.pods:
            raise ScenarioError(f"create: pod {spec.pod!r} exists already; delete it first")
        qos = pod_qos(spec)
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
        pod = _SimPod(sandbox=sandbox, qos=qos, spec=spec)
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
        if step.create is not None:
            pod = step.create.pod
            errors, seen = self.create(step.create)
        elif step.delete is not None:
            pod = step.delete.pod
            errors, seen = self.delete(step.delete)
        elif step.update is not None:
            pod = step.update.pod
            errors, seen = self.update(step.update)
        else:
            errors, seen = self.restart()
        return StepResult(
            step=index,
            op=step.op,
            pod=pod,
            errors=tuple(errors),
            updates=dict(sorted(seen.items())),
            containers=self.report(),
        )


# ---- putting it together --------------------------------------------------------------


def _resolve_topology(scenario: Scenario, override: str | None) -> Topology:
    source: str | dict[str, Any] | None = override if override is not None else scenario.topology
    if source is None:
        raise ScenarioError(
            "scenario: expected a topology (in the scenario or with --topology), found none"
        )
    if isinstance(source, str) and override is None and scenario.base_dir:
        candidate = Path(scenario.base_dir) / source
        if path_kind(candidate) is not None:
            source = str(candidate)
    return load_topology(source)


def _class_control(
    config: Config, *, resctrl_root: str | None, cgroup_root: str | None, state_dir: str
) -> tuple[list[Controller], ClassSelector | None]:
    """Controllers and class selection from the ``control`` section."""
    from nri_resmgr.control.wiring import class_control_from_config

    return class_control_from_config(
        config.control, resctrl_root=resctrl_root, cgroup_root=cgroup_root, state_dir=state_dir
    )


def run_scenario(
    scenario: Scenario,
    *,
    topology: str | None = None,
    policy: str | None = None,
    config: Config | None = None,
    resctrl_root: str | None = None,
    cgroup_root: str | None = None,
    log: Any = None,
) -> SimulationResult:
    """Run every step of `scenario`; later steps run even when earlier ones had errors.

    `topology`, `policy` and `config` (a daemon `Config`) override the scenario's own.
    """
    topo = _resolve_topology(scenario, topology)
    if config is None:
        doc: dict[str, Any] = {"policyConfig": scenario.config, "control": scenario.control}
        if scenario.policy:
            doc["policy"] = scenario.policy
        config = config_from_mapping(doc, source="scenario")
    name = policy or config.policy
    if policy is None and scenario.policy and "policy" not in config.model_fields_set:
        name = scenario.policy
    try:
        pol = load_policy(
            name, topology=topo, config=config.policy_config, plugin_dirs=config.policy_dirs
        )
    except ConfigError as exc:
        lines, _ = policy_config_problems(exc, policy=name, policy_config=config.policy_config)
        raise ConfigError("; ".join(lines)) from exc
    with tempfile.TemporaryDirectory(prefix="nri-resmgr-sim-") as state_dir:
        controllers, selector = _class_control(
            config, resctrl_root=resctrl_root, cgroup_root=cgroup_root, state_dir=state_dir
        )
        return _simulate(
            scenario,
            topology=topo,
            policy=pol,
            name=name,
            controllers=controllers,
            selector=selector,
            cgroup_root=cgroup_root,
            log=log,
        )


def _simulate(
    scenario: Scenario,
    *,
    topology: Topology,
    policy: Policy,
    name: str,
    controllers: Sequence[Controller],
    selector: ClassSelector | None,
    cgroup_root: str | None,
    log: Any,
) -> SimulationResult:
    if log is None:
        import structlog

        log = structlog.get_logger().bind(component="pipeline")
    sim = Simulator(
        policy=policy,
        cgroup_driver=scenario.cgroup_driver,
        controllers=controllers,
        select_classes=selector,
        cgroup_root=cgroup_root,
        log=log,
    )
    results = tuple(sim.run_step(i, step) for i, step in enumerate(scenario.steps))
    return SimulationResult(
        topology=topology.source or "", policy=name, steps=results, machine=summarize(topology)
    )


def render_json(result: SimulationResult) -> str:
    return json.dumps(result.as_dict(), indent=2)


def render_table(result: SimulationResult) -> str:
    """A plain text table per step, for humans."""
    machine = f" ({result.machine})" if result.machine else ""
    lines = [f"topology: {result.topology}{machine}", f"policy:   {result.policy}", ""]
    header = ("container", "kind", "cpus", "mems", "pool", "rdt", "blockio")
    for s in result.steps:
        lines.append(f"step {s.step}: {s.op}" + (f" {s.pod}" if s.pod else ""))
        for e in s.errors:
            lines.append(f"  error: {e}")
        for k, v in s.updates.items():
            lines.append(f"  updated: {k} -> {v}")
        rows = [header] + [
            (k, r.kind, r.cpus, r.mems, r.pool, r.rdt_class or "-", r.blockio_class or "-")
            for k, r in s.containers.items()
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        if len(rows) > 1:
            for row in rows:
                cells = (col.ljust(w) for col, w in zip(row, widths, strict=True))
                lines.append(("  " + "  ".join(cells)).rstrip())
        else:
            lines.append("  (no containers)")
        lines.append("")
    return "\n".join(lines)
