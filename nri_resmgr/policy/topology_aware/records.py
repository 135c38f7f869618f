"""Topology-aware grants as placement records, and back (issue 24).

Theory of operation: the state is its grants (`state.TopologyAwareState`: the supply is
derived from them), so a container's record is its `Grant`: the pool (an index of the
pool tree, which the record's scope ties to this configuration and machine), the kind,
the exclusive CPUs, and the request figures a placement may have changed from what the
container asks (a fallback to shared, an overcommit at rebuild, a reserved request
beyond the reserved capacity).  The rest of the request (affinities,
the CPU priority, the unlimited-burstable level) is read from the container again, as
every decision reads it (`grants_of` reads each distinct meaning once, and the request
of each container).  `grant_of` refuses a record whose pool, kind or CPUs cannot be
read, with a `RecordError`; whether the grants together are a valid state is the
policy's invariants' question, asked by the kit (`kit.rebuild.restart`).

A decision records every container it changes, and an exclusive one changes the cpusets
of its pool's shared containers, whose grants stay the same objects: `MeaningMemo`
keeps each container's meaning with the grant it was made of and makes it again only
for another grant (it was a third of an exclusive decision at 1,000 live).  Equal
meanings are one object (the containers of a pool with the same request: most of a
node), so the memo holds one meaning per distinct placement, not per container (a
meaning per container was about 0.6 MiB at 1,000 live, docs/benchmarks.md, "RSS at
1,000 live").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import NamedTuple

from nri_resmgr.model import AnnotationError, ContainerID, ContainerInfo, CPUKind, MemoryKind
from nri_resmgr.policy.kit.records import Meaning, MeaningFields, RecordError
from nri_resmgr.policy.topology_aware.config import ResolvedConfig
from nri_resmgr.policy.topology_aware.pools import PoolTree
from nri_resmgr.policy.topology_aware.preferences import (
    ContainerRequest,
    RequestShapes,
    container_request,
)
from nri_resmgr.policy.topology_aware.reports import unreadable_request
from nri_resmgr.policy.topology_aware.state import Grant
from nri_resmgr.topology.cpuset import IDSet, IDSetError

__all__ = ["MeaningMemo", "grant_of", "grants_of", "meaning_of"]


def meaning_of(grant: Grant) -> Meaning:
    """The record of `grant`."""
    req = grant.request
    return {
        "pool": grant.pool,
        "kind": grant.kind.value,
        "exclusive": str(grant.exclusive),
        "request_kind": req.kind.value,
        "memory_kinds": ",".join(sorted(k.value for k in req.memory_kinds)),
        "full": req.full,
        "shared_milli": req.shared_milli,
        "memory_bytes": req.memory_bytes,
        "zero_cpu_request": req.zero_cpu_request,
        "prefer_isolated": req.prefer_isolated,
        "pin_memory": req.pin_memory,
    }


class MeaningMemo:
    """`meaning_of` per container, made again only when its grant is another object,
    equal meanings shared (module docstring); forgets everything when it holds more
    than twice the live grants (plus `SLACK`), so it stays within the live set."""

    SLACK = 64

    def __init__(self) -> None:
        self._kept: dict[ContainerID, tuple[Grant, Meaning]] = {}
        #: each distinct meaning kept, by its values (`meaning_of`'s keys, and the type
        #: of each one's value, are fixed: a 1 is never a True of the same key)
        self._shared: dict[tuple[int | str | bool, ...], Meaning] = {}

    def of(self, grant: Grant, *, live: int) -> Meaning:
        """The meaning of `grant`, one of `live` grants (read-only)."""
        kept = self._kept.get(grant.container_id)
        if kept is not None and kept[0] is grant:
            return kept[1]
        if max(len(self._kept), len(self._shared)) > 2 * live + self.SLACK:
            self._kept.clear()
            self._shared.clear()
        made = meaning_of(grant)
        key = tuple(made.values())
        meaning = self._shared.get(key)
        if meaning is None:
            meaning = self._shared[key] = MappingProxyType(made)
        self._kept[grant.container_id] = (grant, meaning)
        return meaning


class _Figures(NamedTuple):
    """The request figures a placement may have changed, named as `ContainerRequest`'s
    fields."""

    kind: CPUKind
    memory_kinds: frozenset[MemoryKind]
    full: int
    shared_milli: int
    memory_bytes: int
    zero_cpu_request: bool
    prefer_isolated: bool
    pin_memory: bool


@dataclass(frozen=True, slots=True)
class _Recorded:
    """What one meaning holds, read: the grant's pool, kind and CPUs, and the request
    figures the placement may have changed (`grant_of` puts them over the request the
    container asks now)."""

    pool: int
    kind: CPUKind
    exclusive: IDSet
    figures: _Figures


def _read(subject: str, meaning: Meaning, tree: PoolTree) -> _Recorded:
    """`meaning` read (`RecordError` naming `subject` when it cannot be)."""
    field = MeaningFields(subject, meaning)
    pool = field.integer("pool")
    if not 0 <= pool < len(tree.pools):
        raise RecordError(f"{subject}: pool {pool}; expected 0 to {len(tree.pools) - 1}")
    try:
        kind = CPUKind(field.text("kind"))
        request_kind = CPUKind(field.text("request_kind"))
        exclusive = IDSet.parse(field.text("exclusive"))
        kinds = frozenset(MemoryKind(k) for k in field.text("memory_kinds").split(",") if k)
    except (ValueError, IDSetError) as exc:
        raise RecordError(f"{subject}: a topology-aware record; {exc}") from exc
    figures = _Figures(
        kind=request_kind,
        memory_kinds=kinds,
        full=field.integer("full"),
        shared_milli=field.integer("shared_milli"),
        memory_bytes=field.integer("memory_bytes"),
        zero_cpu_request=field.flag("zero_cpu_request"),
        prefer_isolated=field.flag("prefer_isolated"),
        pin_memory=field.flag("pin_memory"),
    )
    return _Recorded(pool=pool, kind=kind, exclusive=exclusive, figures=figures)


def grant_of(
    c: ContainerInfo, meaning: Meaning, *, config: ResolvedConfig, tree: PoolTree
) -> Grant:
    """The grant `meaning` records for `c` (as reported now); `RecordError` when it
    cannot be read."""
    return _granted(c, _read(c.pretty, meaning, tree), config)


def grants_of(
    records: Iterable[tuple[ContainerInfo, Meaning]], *, config: ResolvedConfig, tree: PoolTree
) -> dict[ContainerID, Grant]:
    """`grant_of` each container of `records`, each distinct meaning read once (the
    shared containers of a pool with the same request record the same one: a restart
    of 1,000 containers holds about 110)."""
    read: dict[tuple[tuple[str, type, int | str | bool], ...], _Recorded] = {}
    shapes = RequestShapes(config)
    out: dict[ContainerID, Grant] = {}
    for c, meaning in records:
        # with each value's type: True == 1, and a flag is not a pool number
        key = tuple((k, type(v), v) for k, v in meaning.items())
        recorded = read.get(key)
        if recorded is None:
            recorded = read[key] = _read(c.pretty, meaning, tree)
        out[c.id] = _granted(c, recorded, config, shapes.of)
    return out


def _granted(
    c: ContainerInfo,
    recorded: _Recorded,
    config: ResolvedConfig,
    ask: Callable[[ContainerInfo], ContainerRequest] | None = None,
) -> Grant:
    """The grant of `c` that `recorded` holds, over the request `c` asks now (`ask`:
    `container_request` in `config` by default)."""
    try:
        asked = container_request(c, config) if ask is None else ask(c)
    except AnnotationError:
        asked = unreadable_request(pin_cpu=config.options.pin_cpu)
    # most records hold what the container asks (no fallback, no overcommit): its
    # request as it is then, a copy only where a figure differs (`replace` is about
    # half the cost of reading the request again)
    figures = recorded.figures
    asks = _Figures._make(getattr(asked, name) for name in _Figures._fields)
    request: ContainerRequest = asked if asks == figures else replace(asked, **figures._asdict())
    return Grant(
        container_id=c.id,
        pod_id=c.pod.id,
        namespace=c.namespace,
        pool=recorded.pool,
        kind=recorded.kind,
        exclusive=recorded.exclusive,
        request=request,
    )
