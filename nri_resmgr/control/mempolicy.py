"""NUMA memory policy: which ``set_mempolicy(2)`` mode and nodes a container starts with.

Theory of operation
-------------------
nri-plugins v0.14.0 ships this as a plugin of its own, ``memory-policy``
(cmd/plugins/memory-policy); here it is a component beside the policies, so the nodes
it names follow the placement topology-aware or balloons gives the container.  The
configuration is theirs, under ``control.memoryPolicy`` (their plugin's file, top-level
``classes``, loads unchanged, `nri_resmgr.control.memory_documents`)::

    injectMpolset: false          # accepted either way; see below
    classes:
    - name: interleave-cpu-packages
      policy: {mode: MPOL_INTERLEAVE, nodes: cpu-packages, flags: [MPOL_F_STATIC_NODES]}

A container's policy comes from its pod's annotations, as theirs (``effectiveAnnotations``
and ``getPolicySpec`` in their main.go):

* ``policy.memory-policy.nri.io`` (a YAML ``{mode, nodes, flags}``) or
  ``class.memory-policy.nri.io`` (a class name), each also as ``.../container.NAME``;
* a container-level ``class`` or ``policy`` hides both pod-level ones; at one level a
  ``policy`` wins over a ``class``; an empty value means no policy (it unsets the pod's
  default for one container); so does a policy whose ``mode`` is empty;
* any other ``*.memory-policy.nri.io`` key of the container is an error (theirs checks
  that only when no class or policy is found).

``nodes`` is resolved against the machine and the container's placement (`resolve_nodes`):
``all`` (every node), ``allowed-mems`` (the memory nodes it was pinned to: its cpuset.mems,
every node when the policy does not pin memory), ``cpu-nodes`` (the nodes of its CPUs),
``cpu-packages`` (every node of the packages of its CPUs; a memory-only node belongs to
the package of its closest CPU node, the rule of the topology model), ``max-dist:N``
(every node within firmware distance N of the nodes of its CPUs) or a node list
``0-3,8``.  The result travels as NRI's ``LinuxMemoryPolicy`` (NRI v0.12.0+); runc 1.4+
calls ``set_mempolicy`` in the container's init, so ``/proc/PID/numa_maps`` shows it.

Where this differs from nri-plugins, by design (their rules are read from main.go):

* checks the kernel and runc would make at container start are made here, at
  configuration (a class) or at creation (an annotation), with the subject named: a mode
  that takes no nodes (``MPOL_DEFAULT``, ``MPOL_LOCAL``) given some, a mode that needs
  nodes given none (theirs indexes ``nodes[0]`` of an empty string and panics), both
  ``MPOL_F_STATIC_NODES`` and ``MPOL_F_RELATIVE_NODES``, ``MPOL_F_NUMA_BALANCING``
  without ``MPOL_BIND``/``MPOL_PREFERRED_MANY``, a node list naming nodes the machine
  lacks, ``max-dist`` below 10 (a node's distance to itself);
* resolved nodes none of which are among the container's memory nodes fail the
  container with that said (the kernel intersects them with cpuset.mems and answers
  EINVAL; theirs logs it at debug level), unless ``MPOL_F_RELATIVE_NODES`` maps them;
* ``injectMpolset: true`` (theirs: prepend their ``mpolset`` helper to the container's
  command; in v0.14.0 the only way their plugin applies a policy, so their chart's
  default) is accepted and said once by the controller (`nri_resmgr.control.memory`):
  this daemon ships no ``mpolset`` and carries the policy as NRI's ``LinuxMemoryPolicy``,
  which is what their code means to do once NRI has it (``ToMemoryPolicyAdjustment``),
  so a migrated configuration keeps its classes;
* their YAML reader matches keys in any case (Go's encoding/json); so does this one.

The configuration models (`MemoryPolicyConfig`, `MemoryPolicySpec`, `parse_nodes`) are in
`nri_resmgr.control.memory_config`, validated with every configuration; this module loads
only when ``control.memoryPolicy`` switches the component on (and for ``validate-config``'s
machine check).  Pure: no IO.  The controller that renders the adjustment is
`nri_resmgr.control.memory`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from nri_resmgr.control.memory_config import (
    MemoryPolicyConfig,
    MemoryPolicySpec,
    MpolFlag,
    MpolMode,
    NodesForm,
    NodesSpec,
)
from nri_resmgr.limits import load_annotation_yaml, shown
from nri_resmgr.model import AnnotationError, ConfigError, ContainerInfo, ResmgrError
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.validation import validation_messages

__all__ = [
    "CLASS_ANNOTATION",
    "POLICY_ANNOTATION",
    "MemoryPolicy",
    "check_classes",
    "policy_for",
    "resolve_nodes",
]

ANNOTATION_SUFFIX = ".memory-policy.nri.io"
CLASS_ANNOTATION = "class" + ANNOTATION_SUFFIX
POLICY_ANNOTATION = "policy" + ANNOTATION_SUFFIX


@dataclass(frozen=True, slots=True)
class MemoryPolicy:
    """What a container starts with: NRI's ``LinuxMemoryPolicy`` as a domain value."""

    mode: MpolMode
    nodes: NodeSet
    flags: tuple[MpolFlag, ...]
    #: where it came from, for logs: ``class NAME`` or the annotation key
    source: str
    #: the ``nodes`` value as configured (``cpu-packages``), for logs
    nodes_spec: str


def check_classes(config: MemoryPolicyConfig, topology: Topology) -> None:
    """`ConfigError` for a class whose node list names nodes the
    machine lacks: the one class rule that needs the machine."""
    machine = IDSet(topology.nodes)
    for i, c in enumerate(config.classes):
        spec = c.policy.nodes_spec
        if spec.form is NodesForm.LIST and not spec.nodes <= machine:
            raise ConfigError(
                f"control.memoryPolicy.classes[{i}] ({c.name}): policy.nodes: expected nodes "
                f"of this machine ({machine}), found {spec.nodes} (no node "
                f"{spec.nodes - machine})"
            )


def resolve_nodes(spec: NodesSpec, *, topology: Topology, cpus: CPUSet, mems: NodeSet) -> NodeSet:
    """The nodes `spec` names for a container on `cpus` pinned to memory `mems` (both
    already widened to the machine's when the policy does not pin; module docstring)."""
    form = spec.form
    if form is NodesForm.NONE:
        return IDSet()
    if form is NodesForm.ALL:
        return IDSet(topology.nodes)
    if form is NodesForm.ALLOWED_MEMS:
        return mems
    if form is NodesForm.LIST:
        return spec.nodes
    cpu_nodes = topology.nodes_of(cpus)
    if form is NodesForm.CPU_NODES:
        return cpu_nodes
    if form is NodesForm.CPU_PACKAGES:
        packages = {topology.cpu(c).package_id for c in cpus}
        return IDSet(n for n in topology.nodes if _node_package(topology, n) in packages)
    return IDSet(
        n
        for n in topology.nodes
        if any(topology.distance(f, n) <= spec.distance for f in cpu_nodes)
    )


def _node_package(topology: Topology, node: int) -> int:
    """The package of `node`: that of its CPUs, or of its closest CPU node's (memory-only)."""
    owner = topology.closest_cpu_node(node)
    return topology.cpu(topology.node_cpus(owner).sorted()[0]).package_id


def _effective(container: ContainerInfo) -> tuple[dict[str, str], dict[str, str]]:
    """(prefix -> value, prefix -> key) of the container's memory-policy annotations,
    pod annotations over the container's own; container-level class/policy hide the
    pod-level ones (their effectiveAnnotations)."""
    merged = {**container.annotations, **container.pod.annotations}
    ctr_suffix = f"{ANNOTATION_SUFFIX}/container.{container.name}"
    pod_level: dict[str, tuple[str, str]] = {}
    ctr_level: dict[str, tuple[str, str]] = {}
    for key, value in merged.items():
        if key.endswith(ctr_suffix):
            ctr_level[key.removesuffix(ctr_suffix)] = (value, key)
        elif key.endswith(ANNOTATION_SUFFIX):
            pod_level[key.removesuffix(ANNOTATION_SUFFIX)] = (value, key)
    if {"class", "policy"} & ctr_level.keys():
        pod_level.pop("class", None)
        pod_level.pop("policy", None)
    chosen = {**pod_level, **ctr_level}
    return {p: v for p, (v, _k) in chosen.items()}, {p: k for p, (_v, k) in chosen.items()}


def _annotated_spec(container: ContainerInfo, key: str, value: str) -> MemoryPolicySpec:
    where = f"{container.pretty}: annotation {key}"
    doc = load_annotation_yaml(value, where=where)
    if not isinstance(doc, Mapping):
        raise AnnotationError(
            f"{where}: expected a mapping {{mode, nodes, flags}}, found {type(doc).__name__}"
        )
    try:
        return MemoryPolicySpec.model_validate(dict(doc))
    except (ValidationError, ValueError) as exc:
        lines = (
            validation_messages(exc, model=MemoryPolicySpec)
            if isinstance(exc, ValidationError)
            else [str(exc)]
        )
        raise AnnotationError(f"{where}: {'; '.join(lines)}") from exc


def _chosen_spec(
    container: ContainerInfo, config: MemoryPolicyConfig
) -> tuple[MemoryPolicySpec, str] | None:
    """The spec the annotations choose and where it came from (None: no policy)."""
    values, keys = _effective(container)
    unknown = sorted(set(values) - {"class", "policy"})
    if unknown:
        raise AnnotationError(
            f"{container.pretty}: annotation {keys[unknown[0]]}: expected {CLASS_ANNOTATION} "
            f"or {POLICY_ANNOTATION} (or their /container.NAME forms), found an unknown key"
        )
    raw = values.get("policy", "")
    if raw.strip():
        return _annotated_spec(container, keys["policy"], raw), f"annotation {keys['policy']}"
    name = values.get("class", "").strip()
    if not name:
        return None
    found = config.by_name().get(name)
    if found is None:
        known = ", ".join(sorted(config.by_name())) or "none configured"
        raise AnnotationError(
            f"{container.pretty}: annotation {keys['class']} names memory policy class "
            f"{shown(name)}; expected one of control.memoryPolicy.classes ({known})"
        )
    return found.policy, f"class {name}"


def policy_for(
    container: ContainerInfo,
    config: MemoryPolicyConfig,
    *,
    topology: Topology,
    cpus: CPUSet,
    mems: NodeSet,
) -> MemoryPolicy | None:
    """The memory policy `container` starts with, None for none (module docstring).

    `cpus` and `mems` are its placement (the machine's when the policy does not pin).
    Raises `AnnotationError` for a bad annotation and `ResmgrError` for nodes the kernel
    would refuse for this placement.
    """
    chosen = _chosen_spec(container, config)
    if chosen is None or chosen[0].mode is None:
        return None
    spec, source = chosen
    mode = spec.mode
    assert mode is not None  # checked above; narrows for mypy
    nodes_spec = spec.nodes_spec
    machine = IDSet(topology.nodes)
    if nodes_spec.form is NodesForm.LIST and not nodes_spec.nodes <= machine:
        raise AnnotationError(
            f"{container.pretty}: {source}: nodes: expected nodes of this machine ({machine}), "
            f"found {nodes_spec.nodes} (no node {nodes_spec.nodes - machine})"
        )
    nodes = resolve_nodes(nodes_spec, topology=topology, cpus=cpus, mems=mems)
    if nodes_spec.form is not NodesForm.NONE:
        subject = f"{container.pretty}: memory policy {spec.describe()} ({source})"
        if not nodes:
            raise ResmgrError(
                f"{subject}: expected nodes for CPUs {cpus} and memory nodes {mems}, found none"
            )
        if MpolFlag.RELATIVE_NODES not in spec.flags and nodes.isdisjoint(mems):
            raise ResmgrError(
                f"{subject}: expected nodes among the container's memory nodes {mems} (the "
                f"kernel refuses a policy outside its cpuset.mems), found {nodes}"
            )
    return MemoryPolicy(
        mode=mode, nodes=nodes, flags=spec.flags, source=source, nodes_spec=str(nodes_spec)
    )
