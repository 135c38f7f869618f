"""Topology-aware grants as placement records, and back (issue 24).

Theory of operation: the state is its grants (`state.TopologyAwareState`: the supply is
derived from them), so a container's record is its `Grant`: the pool (an index of the
pool tree, which the record's scope ties to this configuration and machine), the kind,
the exclusive CPUs, and the request figures a placement may have changed from what the
container asks (a fallback to shared, an overcommit at rebuild, a reserved request
beyond the reserved capacity: `REQUEST_FIGURES`).  The rest of the request (affinities,
the CPU priority, the unlimited-burstable level) is read from the container again, as
every decision reads it.  `grant_of` refuses a record whose pool, kind or CPUs cannot be
read, with a `RecordError`; whether the grants together are a valid state is the
policy's invariants' question, asked by the kit (`kit.rebuild.restart`).
"""

from __future__ import annotations

from dataclasses import replace

from nri_resmgr.model import AnnotationError, ContainerInfo, CPUKind, MemoryKind
from nri_resmgr.policy.kit.records import Meaning, RecordError
from nri_resmgr.policy.topology_aware.config import ResolvedConfig
from nri_resmgr.policy.topology_aware.pools import PoolTree
from nri_resmgr.policy.topology_aware.preferences import ContainerRequest, container_request
from nri_resmgr.policy.topology_aware.reports import unreadable_request
from nri_resmgr.policy.topology_aware.state import Grant
from nri_resmgr.topology.cpuset import IDSet, IDSetError

__all__ = ["REQUEST_FIGURES", "grant_of", "meaning_of"]

#: the request's figures a placement may set apart from what the container asks
REQUEST_FIGURES = (
    "full",
    "shared_milli",
    "memory_bytes",
    "zero_cpu_request",
    "prefer_isolated",
    "pin_memory",
)


def meaning_of(grant: Grant) -> Meaning:
    """The record of `grant`."""
    req = grant.request
    out: dict[str, int | str | bool] = {
        "pool": grant.pool,
        "kind": grant.kind.value,
        "exclusive": str(grant.exclusive),
        "request_kind": req.kind.value,
        "memory_kinds": ",".join(sorted(k.value for k in req.memory_kinds)),
    }
    for name in REQUEST_FIGURES:
        out[name] = getattr(req, name)
    return out


def grant_of(
    c: ContainerInfo, meaning: Meaning, *, config: ResolvedConfig, tree: PoolTree
) -> Grant:
    """The grant `meaning` records for `c` (as reported now); `RecordError` when it
    cannot be read."""
    try:
        pool = meaning["pool"]
        if type(pool) is not int or not 0 <= pool < len(tree.pools):
            raise RecordError(f"{c.pretty}: pool {pool!r}; expected 0 to {len(tree.pools) - 1}")
        kind = CPUKind(meaning["kind"])
        request_kind = CPUKind(meaning["request_kind"])
        exclusive = IDSet.parse(str(meaning["exclusive"]))
        kinds = frozenset(MemoryKind(k) for k in str(meaning["memory_kinds"]).split(",") if k)
        figures = {name: meaning[name] for name in REQUEST_FIGURES}
    except (KeyError, ValueError, IDSetError) as exc:
        raise RecordError(f"{c.pretty}: a topology-aware record; {exc}") from exc
    for name, value in figures.items():
        expected = type(getattr(_TYPES, name))
        if type(value) is not expected:
            raise RecordError(f"{c.pretty}: {name} {value!r}; expected a {expected.__name__}")
    try:
        asked = container_request(c, config)
    except AnnotationError:
        asked = unreadable_request(pin_cpu=config.options.pin_cpu)
    request: ContainerRequest = replace(asked, kind=request_kind, memory_kinds=kinds, **figures)
    return Grant(
        container_id=c.id,
        pod_id=c.pod.id,
        namespace=c.namespace,
        pool=pool,
        kind=kind,
        exclusive=exclusive,
        request=request,
    )


#: a request whose figures show each one's type
_TYPES = unreadable_request(pin_cpu=True)
