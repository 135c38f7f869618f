"""Their fmbt fuzz models (``fuzz.aal``) as hypothesis strategies over the same operations.

Each model lists pods to create (name, template, per-container CPU in milli and memory in
MB, container count, namespace, template variables) and deletes; a create is enabled while
the running totals stay under the model's bounds (``max_mem``, ``max_cpu``,
``max_reserved_cpu`` for kube-system pods), a delete while the pod exists.  Their test
passes when every created pod becomes Ready: here, when no container is refused.
(Their ``container-exit0`` inputs kill a process that the kubelet restarts in place; the
allocation is kept, so they are no step here.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.parity.suite import Suite, Template

__all__ = ["FuzzPod", "apply", "operations"]


@dataclass(frozen=True)
class FuzzPod:
    name: str
    template: Template
    cpu: int  # milli-CPU per container, as their model counts it
    mem: int  # MB per container
    count: int
    namespace: str = "default"
    variables: Mapping[str, str] = field(default_factory=dict)


def operations(pods: Sequence[FuzzPod], max_ops: int = 25) -> st.SearchStrategy[list[int]]:
    """Indices into ``pods``: create it when absent, delete it when present."""
    return st.lists(st.integers(0, len(pods) - 1), min_size=1, max_size=max_ops)


def apply(
    suite: Suite,
    pods: Sequence[FuzzPod],
    ops: Sequence[int],
    *,
    max_mem: int,
    max_cpu: int,
    max_reserved_cpu: int,
) -> list[str]:
    """Add the enabled operations to `suite`; returns what was done, for messages."""
    live: dict[str, FuzzPod] = {}
    mem = cpu = reserved = 0
    done = []
    for i in ops:
        p = pods[i]
        reserved_pod = p.namespace == "kube-system"
        if p.name in live:
            suite.delete(p.name)
            del live[p.name]
            mem -= p.mem * p.count
            if reserved_pod:
                reserved -= p.cpu * p.count
            else:
                cpu -= p.cpu * p.count
            done.append(f"delete {p.name}")
            continue
        if mem + p.mem * p.count >= max_mem:
            continue
        if reserved_pod and reserved + p.cpu * p.count >= max_reserved_cpu:
            continue
        if not reserved_pod and cpu + p.cpu * p.count >= max_cpu:
            continue
        extra: dict[str, Any] = dict(p.variables)
        suite.create(p.template, name=p.name, namespace=p.namespace, CONTCOUNT=p.count, **extra)
        live[p.name] = p
        mem += p.mem * p.count
        if reserved_pod:
            reserved += p.cpu * p.count
        else:
            cpu += p.cpu * p.count
        done.append(f"create {p.name}")
    return done
