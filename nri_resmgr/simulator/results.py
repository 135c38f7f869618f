"""What a simulation reports, per container and per step, and its JSON and table renderings."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_resmgr.ops.metrics import BalloonSnapshot

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
    #: the policy's balloons after this step (policies with a ``balloons`` hook only)
    balloons: tuple[BalloonSnapshot, ...] = ()
    #: every interrupt's smp_affinity_list after this step (a simulation with a procfs
    #: root only)
    irqs: Mapping[int, str] = field(default_factory=dict)
    #: CPU class -> its CPUs after this step (policies with a ``cpu_class_use`` hook)
    cpu_classes: Mapping[str, str] = field(default_factory=dict)
    #: a synchronize step's containers that did not keep the placement they were
    #: reported with: pod/name -> ``cpus A -> B`` and/or ``mems X -> Y``
    moved: Mapping[str, str] = field(default_factory=dict)
    #: the NodeResourceTopology fields (zones, attributes) the daemon would report after
    #: this step (`nri_resmgr.kube.nrt.node_fields`; empty when not computed)
    nrt: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "step": self.step,
            "op": self.op,
            "pod": self.pod,
            "errors": list(self.errors),
            "updates": dict(self.updates),
            "containers": {k: v.as_dict() for k, v in self.containers.items()},
        }
        if self.balloons:
            out["balloons"] = [b.as_dict() for b in self.balloons]
        if self.irqs:
            out["irqs"] = {str(n): c for n, c in sorted(self.irqs.items())}
        if self.cpu_classes:
            out["cpu_classes"] = dict(self.cpu_classes)
        if self.op == "synchronize":
            out["moved"] = dict(self.moved)
        if self.nrt:
            out["nrt"] = dict(self.nrt)
        return out


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
        if s.op == "synchronize":
            lines += [f"  moved: {k}: {v}" for k, v in s.moved.items()] or ["  moved: none"]
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
        lines += _balloon_rows(s.balloons)
        if s.cpu_classes:
            lines.append(
                "  cpu classes: " + ", ".join(f"{k}={v}" for k, v in s.cpu_classes.items())
            )
        lines += _nrt_rows(s.nrt)
        lines.append("")
    return "\n".join(lines)


def _nrt_rows(nrt: Mapping[str, Any]) -> list[str]:
    """The NUMA zones' cpu and memory (available/allocatable) and the alignment
    attributes of a step's NodeResourceTopology, one line each."""
    if not nrt:
        return []
    attrs = {a["name"]: a["value"] for a in nrt.get("attributes", [])}
    lines = [
        "  nrt: topologyManagerPolicy={} topologyManagerScope={}".format(
            attrs.get("topologyManagerPolicy", "-"), attrs.get("topologyManagerScope", "-")
        )
    ]
    for z in nrt.get("zones", []):
        if z.get("type") != "Node":
            continue
        res = {r["name"]: r for r in z.get("resources", [])}
        cells = [
            f"{name} {res[name]['available']}/{res[name]['allocatable']}"
            for name in ("cpu", "memory")
            if name in res
        ]
        lines.append(f"  nrt {z['name']}: available/allocatable " + ", ".join(cells))
    return lines


def _balloon_rows(balloons: tuple[BalloonSnapshot, ...]) -> list[str]:
    if not balloons:
        return []
    header = ("balloon", "type", "cpus", "mems", "containers")
    rows = [header] + [
        (b.name, b.type, b.cpus or "-", b.mems or "-", ",".join(b.containers) or "-")
        for b in balloons
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return [
        ("  " + "  ".join(col.ljust(w) for col, w in zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]
