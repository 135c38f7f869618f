"""The seeded generator of machines, configurations and pod sequences.

Theory of operation: every generator here is a plain function of a `Draw`, a source of
small choices (an integer in a range, one of a few options). Two sources implement it:

* `RandomDraw`, over `random.Random(seed)`: the fixed-seed CI profile and the long run
  draw from it, so a seed names one case for good;
* `HypothesisDraw`, over a hypothesis ``draw``: `cases()` wraps the same functions as a
  hypothesis strategy, so a divergence shrinks to the shortest sequence (integers
  shrink toward the low end, options toward the first, which is always the simplest).

A `Case` is a machine, a policy configuration and a list of operations: `CreatePod` (a
pod with its init containers and containers), `DeletePod` (the n-th live pod, modulo the
live count) and `Restart` (both plugins stop and start again over the same containers).
Pods cover every QoS class, integer and fractional CPUs, CPU and memory limits and none,
and the annotations each policy reads (`TA_ANNOTATIONS`; balloons: the type annotation).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st

from nri_resmgr.topology.model import Topology

__all__ = [
    "Case",
    "CreatePod",
    "Ctr",
    "DeletePod",
    "Draw",
    "HypothesisDraw",
    "Op",
    "Pod",
    "RandomDraw",
    "Restart",
    "balloons_config",
    "machine_spec",
    "operations",
]

T = TypeVar("T")
MI = 1 << 20
GI = 1 << 30
ANN = "resource-policy.nri.io"
BALLOON_ANNOTATION = f"balloon.balloons.{ANN}"
#: the pod label balloons pods carry and a ``groupBy`` type groups them by
GROUP_LABEL = "app"
GROUPS = ("a", "b", "c")


class Draw(Protocol):
    """A source of choices."""

    def integer(self, lo: int, hi: int) -> int: ...

    def choice(self, options: Sequence[T]) -> T: ...

    def items(self, item: Callable[[Draw], T], lo: int, hi: int) -> list[T]:
        """`lo` to `hi` values of `item`, each drawn on its own (so that hypothesis can
        drop any of them when it shrinks)."""
        ...


class RandomDraw:
    """Choices from a seeded `random.Random`."""

    def __init__(self, seed: int | str) -> None:
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def items(self, item: Callable[[Draw], T], lo: int, hi: int) -> list[T]:
        return [item(self) for _ in range(self.integer(lo, hi))]


class HypothesisDraw:
    """Choices from hypothesis (inside `st.composite`), so they shrink."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        value: int = self.draw(st.integers(lo, hi))
        return value

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def items(self, item: Callable[[Draw], T], lo: int, hi: int) -> list[T]:
        one = st.composite(lambda draw: item(HypothesisDraw(draw)))()
        values: list[T] = self.draw(st.lists(one, min_size=lo, max_size=hi))
        return values


def chance(d: Draw, percent: int) -> bool:
    """True in about `percent` of draws; shrinks to False."""
    return d.integer(0, 99) >= 100 - percent


# ---- machines --------------------------------------------------------------------------


def machine_spec(d: Draw) -> dict[str, Any]:
    """A random synthetic machine: sockets, dies, NUMA nodes, L3 groups, SMT on or off,
    isolated CPUs and CPU-less memory nodes (`nri_resmgr.topology.synthetic` spec)."""
    spec: dict[str, Any] = {
        "packages": d.integer(1, 4),
        "dies": d.choice((1, 1, 2)),
        "nodes": d.choice((1, 2)),
        "cores": d.integer(2, 8),
        "threads": d.choice((2, 1)),
        "memory": f"{d.choice((4, 2, 8, 16))}G",
    }
    per_die = spec["nodes"] * spec["cores"]
    spec["l3_per_die"] = d.choice([n for n in (1, 2, 4) if per_die % n == 0])
    spec["numbering"] = d.choice(("linux", "qemu"))
    total = spec["packages"] * spec["dies"] * per_die * spec["threads"]
    if chance(d, 25):
        first = d.integer(1, total - 1)
        spec["isolated"] = f"{first}-{min(total - 1, first + d.integer(0, 3))}"
    if chance(d, 25):
        cpu_nodes = spec["packages"] * spec["dies"] * spec["nodes"]
        spec["extra_memory_nodes"] = [
            {
                "kind": d.choice(("pmem", "hbm")),
                "memory": f"{d.choice((2, 8))}G",
                "attach": d.integer(0, cpu_nodes - 1),
            }
            for _ in range(d.integer(1, 2))
        ]
    return spec


# ---- pods ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ctr:
    """One container's resources (milli-CPU, bytes; None: not set)."""

    name: str
    cpu_request: int
    cpu_limit: int | None
    memory_request: int | None
    memory_limit: int | None


@dataclass(frozen=True, slots=True)
class Pod:
    name: str
    namespace: str
    qos: str
    containers: tuple[Ctr, ...]
    init: tuple[Ctr, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CreatePod:
    pod: Pod

    def __str__(self) -> str:
        p = self.pod
        ctrs = ", ".join(_ctr_text(c) for c in p.containers)
        init = f" init [{', '.join(_ctr_text(c) for c in p.init)}]" if p.init else ""
        ann = f" {dict(p.annotations)}" if p.annotations else ""
        labels = "".join(f" {k}={v}" for k, v in p.labels)
        return f"create {p.namespace}/{p.name}{labels} {p.qos}{init} [{ctrs}]{ann}"


@dataclass(frozen=True, slots=True)
class DeletePod:
    index: int

    def __str__(self) -> str:
        return f"delete live pod #{self.index}"


@dataclass(frozen=True, slots=True)
class Restart:
    def __str__(self) -> str:
        return "restart both plugins"


Op = CreatePod | DeletePod | Restart


def _ctr_text(c: Ctr) -> str:
    lim = "" if c.cpu_limit is None else f"/{c.cpu_limit}m"
    mem = "" if c.memory_limit is None else f" mem<={c.memory_limit // MI}Mi"
    return f"{c.name} {c.cpu_request}m{lim}{mem}"


@dataclass(frozen=True, slots=True)
class Case:
    """One machine, one configuration, one sequence of operations."""

    machine: str
    policy: str
    config: str
    ops: tuple[Op, ...]
    seed: int | None = None


def _cpu(d: Draw, cpus: int) -> int:
    """Milli-CPU: whole CPUs up to an eighth of the machine (at most 4), or a fraction."""
    if chance(d, 55):
        return 1000 * d.integer(1, max(1, min(4, cpus // 8)))
    return 100 * d.integer(1, 15)


def _container(d: Draw, name: str, qos: str, cpus: int) -> Ctr:
    if qos == "besteffort":
        return Ctr(name, 0, None, None, None)
    cpu = _cpu(d, cpus)
    mem = d.choice((64, 128, 256, 512, 1024)) * MI
    if qos == "guaranteed":
        return Ctr(name, cpu, cpu, mem, mem)
    limit = None if chance(d, 40) else cpu + 100 * d.integer(1, 20)
    mem_limit = None if chance(d, 35) else mem * d.choice((1, 2))
    return Ctr(name, cpu, limit, mem if mem_limit else None, mem_limit)


def _ta_annotations(d: Draw, ctrs: Sequence[Ctr], kinds: Sequence[str]) -> list[tuple[str, str]]:
    """Topology-aware annotations (per container), each on some pods."""
    out: list[tuple[str, str]] = []
    for c in ctrs:
        for key, values in (
            ("prefer-isolated-cpus", ("true", "false")),
            ("prefer-shared-cpus", ("true", "false")),
            ("hide-hyperthreads", ("true",)),
            ("memory-type", tuple(kinds)),
            ("cpu.preserve", ("true",)),
        ):
            if chance(d, 8):
                out.append((f"{key}.{ANN}/container.{c.name}", d.choice(values)))
    if len(ctrs) > 1 and chance(d, 10):
        key = d.choice(("affinity", "anti-affinity"))
        out.append((f"{ANN}/{key}", f"{ctrs[0].name}: [ {ctrs[1].name} ]\n"))
    return out


def _pod(d: Draw, policy: str, topo: Topology, balloon_types: Sequence[str]) -> Pod:
    """A pod named "?" (containers "?c0", "?i0", ...); `_named` gives it its name."""
    cpus = len(topo.online_cpus())
    qos = d.choice(("guaranteed", "burstable", "besteffort"))
    namespace = "kube-system" if chance(d, 8) else "default"
    containers = tuple(
        replace(c, name=f"?c{j}")
        for j, c in enumerate(d.items(lambda d: _container(d, "", qos, cpus), 1, 3))
    )
    init = tuple(
        _container(d, f"?i{j}", qos, cpus) for j in range(1 if chance(d, 25) else 0)
    )
    annotations: list[tuple[str, str]] = []
    if policy == "topology-aware":
        kinds = ["dram", *sorted({n.kind.value.lower() for n in topo.nodes.values()} - {"dram"})]
        annotations = _ta_annotations(d, containers, [*kinds, "dram,pmem"])
    elif balloon_types and chance(d, 40):
        annotations = [(BALLOON_ANNOTATION, d.choice(balloon_types))]
    labels: tuple[tuple[str, str], ...] = ()
    if policy == "balloons":
        if chance(d, 30):
            namespace = d.choice(("default", "batch", "prod", "kube-system"))
        annotations += _balloons_annotations(d, containers, topo)
        # the label a ``groupBy: ${pod/labels/app}`` type groups by (`balloons_config`)
        labels = ((GROUP_LABEL, d.choice(GROUPS)),)
    return Pod("?", namespace, qos, containers, init, tuple(annotations), labels)


def _balloons_annotations(d: Draw, ctrs: Sequence[Ctr], topo: Topology) -> list[tuple[str, str]]:
    """The per-container annotations the balloons policy reads besides the balloon type,
    each on a few pods: ``hide-hyperthreads`` and, where the machine has more than DRAM,
    ``memory-type``."""
    kinds = sorted({n.kind.value.lower() for n in topo.nodes.values()})
    out: list[tuple[str, str]] = []
    for c in ctrs:
        if chance(d, 5):
            out.append((f"hide-hyperthreads.{ANN}/container.{c.name}", "true"))
        if len(kinds) > 1 and chance(d, 5):
            out.append((f"memory-type.{ANN}/container.{c.name}", d.choice(kinds)))
    return out


def _named(pod: Pod, name: str) -> Pod:
    def ctr(c: Ctr) -> Ctr:
        return replace(c, name=c.name.replace("?", name))

    return replace(
        pod,
        name=name,
        containers=tuple(ctr(c) for c in pod.containers),
        init=tuple(ctr(c) for c in pod.init),
        annotations=tuple(
            (k.replace("?", name), v.replace("?", name)) for k, v in pod.annotations
        ),
    )


def _draft(d: Draw, policy: str, topo: Topology, balloon_types: Sequence[str]) -> Op:
    """One operation, drawn on its own: a pod to create (most), a delete or a restart."""
    kind = d.integer(0, 99)
    if kind < 65:
        return CreatePod(_pod(d, policy, topo, balloon_types))
    if kind < 92:
        return DeletePod(d.integer(0, 7))
    return Restart()


def operations(
    d: Draw, policy: str, topo: Topology, *, balloon_types: Sequence[str] = (), max_ops: int = 16
) -> tuple[Op, ...]:
    """A sequence of pod creations, deletions and plugin restarts, starting with a
    creation. Each is drawn on its own (so a shrink can drop any), then read in order:
    pods get their names p0, p1, ...; a delete or restart with no live pod, and a creation
    that would take the pods' CPU requests past two thirds of the machine (except into an
    empty one), are dropped."""
    first = CreatePod(_pod(d, policy, topo, balloon_types))
    drafts = [first, *d.items(lambda d: _draft(d, policy, topo, balloon_types), 0, max_ops - 1)]
    ops: list[Op] = []
    live: list[int] = []  # the CPU requests of the live pods, in creation order
    budget = len(topo.online_cpus()) * 1000 * 2 // 3
    pods = 0
    for op in drafts:
        if isinstance(op, CreatePod):
            need = sum(c.cpu_request for c in op.pod.containers)
            if live and sum(live) + need > budget:
                continue
            ops.append(CreatePod(_named(op.pod, f"p{pods}")))
            pods += 1
            live.append(need)
        elif live:
            ops.append(op)
            if isinstance(op, DeletePod):
                live.pop(op.index % len(live))
    return tuple(ops)


# ---- balloons configuration ------------------------------------------------------------


def balloons_config(d: Draw, topo: Topology) -> tuple[str, tuple[str, ...]]:
    """A BalloonsPolicy for `topo` (YAML) exercising types matched by namespace and by
    annotation, minCPUs/maxCPUs, allocatorPriority, preferNewBalloons,
    shareIdleCPUsInSame, maxBalloons, minBalloons and groupBy (by the pods' ``app``
    label, `GROUP_LABEL`); returns it and the annotation-selected types."""
    cpus = len(topo.online_cpus())
    types: list[str] = []
    names: list[str] = []
    levels = ("system", "package", "die", "numa", "l2cache", "core")
    for i in range(d.integer(1, 3)):
        name = f"t{i}"
        min_cpus = d.integer(0, max(0, min(4, cpus // 8)))
        lines = [f"  - name: {name}"]
        if i == 0:
            lines.append("    namespaces: [batch]")
        elif i == 1 and chance(d, 50):
            lines.append("    namespaces: [prod]")
        if min_cpus:
            lines.append(f"    minCPUs: {min_cpus}")
        if chance(d, 50):
            lines.append(f"    maxCPUs: {max(min_cpus, 1) + d.integer(0, max(1, cpus // 4))}")
        lines.append(f"    allocatorPriority: {d.choice(('normal', 'high', 'low', 'none'))}")
        if chance(d, 40):
            lines.append("    preferNewBalloons: true")
        if chance(d, 30):
            lines.append(f"    shareIdleCPUsInSame: {d.choice(levels)}")
        if chance(d, 30):
            lines.append(f"    maxBalloons: {d.integer(1, 3)}")
        if min_cpus and chance(d, 30):
            lines.append(f"    minBalloons: {d.integer(1, 2)}")
        if chance(d, 25):
            lines.append(f"    groupBy: ${{pod/labels/{GROUP_LABEL}}}")
        types.append("\n".join(lines))
        names.append(name)
    config = "\n".join(
        [
            "apiVersion: config.nri/v1alpha1",
            "kind: BalloonsPolicy",
            "metadata:",
            "  name: default",
            "spec:",
            "  reservedResources:",
            f"    cpu: '{d.choice(('750m', '1', '1500m'))}'",
            "  pinCPU: true",
            "  pinMemory: true",
            f"  allocatorTopologyBalancing: {d.choice(('true', 'false'))}",
            "  reservedPoolNamespaces: [kube-system]",
            "  balloonTypes:",
            *types,
            "",
        ]
    )
    return config, tuple(names)
