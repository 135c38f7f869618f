"""What a pod needs of a NUMA zone, what a node's report offers, and the verdicts.

Theory of operation: the extender judges one pod against the NodeResourceTopology
(NRT) objects of the candidate nodes, with pure functions:

- `pod_demand`: the pod's QoS class by Kubernetes' rules, and per container what must
  sit in one NUMA zone: a Guaranteed pod's containers hold their whole CPUs exclusively
  (an integer CPU request, as the kubelet's CPU manager and NodeResourceTopologyMatch
  count them; a fractional one runs on shared CPUs) and pin their memory request.
  Burstable and BestEffort pods need nothing of a zone: they fit everywhere.
- `node_offer`: a node's NUMA zones (type ``Node``) with their available ``cpu`` and
  ``memory``, and the alignment its writer declares (``topologyManagerPolicy`` and
  ``topologyManagerScope`` attributes, else the older ``topologyPolicies`` list).  An
  object it cannot read (no NUMA zone, a zone without a readable ``cpu`` available, a
  quantity that is not one) is `Unjudged` with the reason: other writers' objects
  (nri-plugins' pool zones only, for one) are read as far as they are NRT, no further.
- `judge`: does the node hold the pod?  With an aligning policy (``single-numa-node``,
  ``restricted``, ``best-effort``): scope ``container``, each container's need in some
  zone, the largest first, each into the zone it fits tightest (what is left after it
  counts for the next); scope ``pod``, the whole pod in one zone.  With ``none`` the
  node's zones together must hold the sum (the CPUs are still taken, just not aligned).
  Init containers run before and one at a time: each must fit alone.
- `score`: 0..`MAX_SCORE`, from the share of the chosen zones' CPUs (and memory) left
  after placing the pod: ``least-allocated`` favours the node left emptiest (spread),
  ``most-allocated`` the one left fullest (pack).  A pod that needs nothing, or a node
  not judged, scores 0: no opinion.

`filter_nodes` and `prioritize` apply these to the candidates' offers (`offers_of`
parses them; the extender's cache keeps them parsed): a node is failed only
when it was judged and does not hold the pod (its reason names the pod, what it needs
and what the node's zones have); a node without an object, or with one it cannot read,
passes, and the reason is returned for the log.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nri_resmgr.model import ConfigError
from nri_resmgr.policy.common import parse_cpu_quantity, parse_memory_quantity

__all__ = [
    "MAX_SCORE",
    "Demand",
    "Need",
    "Offer",
    "Strategy",
    "Unjudged",
    "Verdict",
    "Zone",
    "filter_nodes",
    "judge",
    "node_offer",
    "offers_of",
    "pod_demand",
    "prioritize",
    "score",
]

#: kube-scheduler's MaxExtenderPriority
MAX_SCORE = 10
ALIGNING = ("single-numa-node", "restricted", "best-effort")
_LEGACY = {
    "None": ("none", "container"),
    "BestEffortContainerLevel": ("best-effort", "container"),
    "BestEffortPodLevel": ("best-effort", "pod"),
    "RestrictedContainerLevel": ("restricted", "container"),
    "RestrictedPodLevel": ("restricted", "pod"),
    "SingleNUMANodeContainerLevel": ("single-numa-node", "container"),
    "SingleNUMANodePodLevel": ("single-numa-node", "pod"),
}


class Strategy(enum.StrEnum):
    LEAST_ALLOCATED = "least-allocated"
    MOST_ALLOCATED = "most-allocated"


class PodError(ValueError):
    """The pod cannot be read (it is then judged nowhere: every node passes)."""


@dataclass(frozen=True, slots=True)
class Need:
    """What one container must find in one NUMA zone."""

    container: str
    cpus: int = 0
    memory: int = 0

    def __bool__(self) -> bool:
        return bool(self.cpus or self.memory)


@dataclass(frozen=True, slots=True)
class Demand:
    pod: str
    qos: str
    needs: tuple[Need, ...] = ()
    init_needs: tuple[Need, ...] = ()

    @property
    def any(self) -> bool:
        return any(self.needs) or any(self.init_needs)

    def describe(self) -> str:
        cpus = sum(n.cpus for n in self.needs)
        memory = sum(n.memory for n in self.needs)
        return f"pod {self.pod} needs {cpus} exclusive CPUs and {memory} bytes of pinned memory"


@dataclass(frozen=True, slots=True)
class Zone:
    name: str
    cpus: int
    memory: int | None
    cpu_allocatable: int
    memory_allocatable: int | None


@dataclass(frozen=True, slots=True)
class Offer:
    node: str
    zones: tuple[Zone, ...]
    policy: str = "none"
    scope: str = "container"


@dataclass(frozen=True, slots=True)
class Unjudged:
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Verdict:
    node: str
    fits: bool
    reason: str = ""
    #: zone name -> (cpus, memory) the pod would take there
    placement: Mapping[str, tuple[int, int]] = field(default_factory=dict)


# ---- the pod -------------------------------------------------------------------------


def _list(value: Any) -> list[Any]:
    """`value` if it is a list, else empty: a field of the wrong shape holds nothing."""
    return value if isinstance(value, list) else []


def _resources(c: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    res = c.get("resources")
    got = res.get(kind) if isinstance(res, Mapping) else None
    return got if isinstance(got, Mapping) else {}


def _amount(value: Any, resource: str, what: str) -> int:
    """A container's quantity: millicores of CPU, bytes of memory; `PodError` if not one."""
    if resource == "cpu":
        try:
            return parse_cpu_quantity(str(value), subject=what, path="")
        except ConfigError as exc:
            raise PodError(str(exc)) from exc
    amount = parse_memory_quantity(str(value))
    if amount is None:
        raise PodError(f"{what}: {value!r} is not a memory quantity; expected e.g. 1Gi")
    return amount


def _qos(containers: Sequence[Mapping[str, Any]], pod: str) -> str:
    """Kubernetes' pod QoS class: Guaranteed when every container has CPU and memory
    limits and its requests (which default to the limits) equal them; BestEffort when
    none sets a request or limit; else Burstable."""
    guaranteed, any_set = bool(containers), False
    for c in containers:
        req, lim = _resources(c, "requests"), _resources(c, "limits")
        for r in ("cpu", "memory"):
            any_set |= r in req or r in lim
            if r not in lim:
                guaranteed = False
                continue
            what = f"pod {pod} container {c.get('name')} {r}"
            limit = _amount(lim[r], r, f"{what} limit")
            request = _amount(req[r], r, f"{what} request") if r in req else limit
            guaranteed &= request == limit
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if any_set else "BestEffort"


def _need(c: Mapping[str, Any], pod: str) -> Need:
    """A Guaranteed container's exclusive CPUs (an integer CPU limit, as the kubelet's
    CPU manager grants them) and pinned memory."""
    name = str(c.get("name") or "?")
    lim = _resources(c, "limits")
    what = f"pod {pod} container {name}"
    milli = _amount(lim.get("cpu", "0"), "cpu", f"{what} cpu limit")
    memory = _amount(lim.get("memory", "0"), "memory", f"{what} memory limit")
    return Need(name, cpus=milli // 1000 if milli % 1000 == 0 else 0, memory=memory)


def pod_demand(pod: Mapping[str, Any]) -> Demand:
    """What `pod` (a Pod object) needs of NUMA zones (module docstring); `PodError` when
    it cannot be read."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise PodError("pod: expected metadata and spec objects")
    name = f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"
    apps = [c for c in _list(spec.get("containers")) if isinstance(c, Mapping)]
    inits = [c for c in _list(spec.get("initContainers")) if isinstance(c, Mapping)]
    qos = _qos(apps + inits, name)
    if qos != "Guaranteed":
        return Demand(pod=name, qos=qos)
    return Demand(
        pod=name,
        qos=qos,
        needs=tuple(_need(c, name) for c in apps),
        init_needs=tuple(_need(c, name) for c in inits),
    )


# ---- the node's report -------------------------------------------------------------------


def _quantity(value: Any, resource: str) -> int | None:
    text = str(value)
    if resource == "cpu":
        try:
            return parse_cpu_quantity(text, subject="cpu", path="") // 1000
        except ConfigError:
            return None
    return parse_memory_quantity(text)


def _attributes(obj: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for a in _list(obj.get("attributes")):
        if isinstance(a, Mapping) and isinstance(a.get("name"), str):
            out[a["name"]] = str(a.get("value", ""))
    return out


def node_offer(node: str, obj: Mapping[str, Any] | None) -> Offer | Unjudged:
    """The NUMA zones and alignment of `node`'s NRT object `obj` (module docstring)."""
    if obj is None:
        return Unjudged(node, f"node {node}: no NodeResourceTopology object")
    zones = []
    raw_zones = obj.get("zones")
    if not isinstance(raw_zones, list):
        return Unjudged(node, f"node {node}: NodeResourceTopology has no zones list")
    for z in raw_zones:
        if not isinstance(z, Mapping) or z.get("type") != "Node":
            continue
        res = {
            r.get("name"): r
            for r in _list(z.get("resources"))
            if isinstance(r, Mapping) and isinstance(r.get("name"), str)
        }
        cpu = res.get("cpu")
        if cpu is None:
            continue  # a CPU-less memory node
        cpus, cpu_alloc = (
            _quantity(cpu.get("available"), "cpu"),
            _quantity(cpu.get("allocatable"), "cpu"),
        )
        if cpus is None or cpu_alloc is None:
            return Unjudged(
                node,
                f"node {node}: zone {z.get('name')!r} cpu available "
                f"{cpu.get('available')!r}/allocatable {cpu.get('allocatable')!r} "
                "are not CPU quantities",
            )
        mem = res.get("memory")
        memory = mem_alloc = None
        if mem is not None:
            memory = _quantity(mem.get("available"), "memory")
            mem_alloc = _quantity(mem.get("allocatable"), "memory")
        zones.append(Zone(str(z.get("name")), cpus, memory, cpu_alloc, mem_alloc))
    if not zones:
        return Unjudged(node, f"node {node}: NodeResourceTopology has no NUMA zone with CPUs")
    attrs = _attributes(obj)
    policy, scope = "none", "container"
    legacy = obj.get("topologyPolicies")
    if isinstance(legacy, list) and legacy and str(legacy[0]) in _LEGACY:
        policy, scope = _LEGACY[str(legacy[0])]
    policy = attrs.get("topologyManagerPolicy", policy)
    scope = attrs.get("topologyManagerScope", scope)
    return Offer(node, tuple(zones), policy=policy, scope=scope)


# ---- verdicts ------------------------------------------------------------------------


def _fits(need: Need, z: tuple[str, int, int | None]) -> bool:
    _, cpus, memory = z
    return need.cpus <= cpus and (memory is None or need.memory <= memory)


def _place(needs: Sequence[Need], zones: Sequence[Zone]) -> dict[str, tuple[int, int]] | None:
    """Each need into the zone it fits tightest, the largest first; None if one fits none."""
    free = [(z.name, z.cpus, z.memory) for z in zones]
    taken: dict[str, tuple[int, int]] = {}
    for need in sorted(needs, key=lambda n: (-n.cpus, -n.memory, n.container)):
        if not need:
            continue
        candidates = [i for i, z in enumerate(free) if _fits(need, z)]
        if not candidates:
            return None
        i = min(candidates, key=lambda i: (free[i][1] - need.cpus, free[i][0]))
        name, cpus, memory = free[i]
        free[i] = (name, cpus - need.cpus, None if memory is None else memory - need.memory)
        c, m = taken.get(name, (0, 0))
        taken[name] = (c + need.cpus, m + need.memory)
    return taken


def _have(offer: Offer) -> str:
    return ", ".join(
        f"{z.name} {z.cpus} CPUs" + (f" {z.memory} bytes" if z.memory is not None else "")
        for z in offer.zones
    )


def judge(demand: Demand, offer: Offer) -> Verdict:
    """Whether `offer`'s node holds `demand` (module docstring)."""
    if not demand.any:
        return Verdict(offer.node, True, "needs nothing of a NUMA zone")
    for init in demand.init_needs:
        if init and _place([init], offer.zones) is None and offer.policy in ALIGNING:
            return Verdict(
                offer.node, False,
                f"{demand.pod} init container {init.container} needs {init.cpus} CPUs and "
                f"{init.memory} bytes in one NUMA zone; node {offer.node} has {_have(offer)}",
            )  # fmt: skip
    needs = list(demand.needs)
    if offer.policy not in ALIGNING:
        total = Zone(
            "node",
            sum(z.cpus for z in offer.zones),
            None if any(z.memory is None for z in offer.zones)
            else sum(z.memory or 0 for z in offer.zones),
            0, None,
        )  # fmt: skip
        zones: Sequence[Zone] = (total,)
        needs = [Need("pod", sum(n.cpus for n in needs), sum(n.memory for n in needs))]
        where = "on the node"
    elif offer.scope == "pod":
        zones = offer.zones
        needs = [Need("pod", sum(n.cpus for n in needs), sum(n.memory for n in needs))]
        where = "in one NUMA zone"
    else:
        zones = offer.zones
        where = "each container in one NUMA zone"
    placement = _place(needs, zones)
    if placement is None:
        return Verdict(
            offer.node, False,
            f"{demand.describe()} {where} ({offer.policy}/{offer.scope}); node "
            f"{offer.node} has {_have(offer)} available",
        )  # fmt: skip
    return Verdict(offer.node, True, "fits", placement)


def score(demand: Demand, offer: Offer, verdict: Verdict, strategy: Strategy) -> int:
    """0..MAX_SCORE for a node that holds the pod (module docstring)."""
    if not demand.any or not verdict.fits or not verdict.placement:
        return 0
    by_name = {z.name: z for z in offer.zones}
    shares = []
    for name, (cpus, memory) in verdict.placement.items():
        z = by_name.get(name)
        if z is None:  # the node-wide placement of a policy that does not align
            alloc = sum(zz.cpu_allocatable for zz in offer.zones)
            left = sum(zz.cpus for zz in offer.zones) - cpus
        else:
            alloc, left = z.cpu_allocatable, z.cpus - cpus
        shares.append(max(left, 0) / alloc if alloc > 0 else 0.0)
        if z is not None and z.memory is not None and z.memory_allocatable:
            shares.append(max(z.memory - memory, 0) / z.memory_allocatable)
    free = sum(shares) / len(shares) if shares else 0.0
    value = free if strategy is Strategy.LEAST_ALLOCATED else 1.0 - free
    return round(MAX_SCORE * min(max(value, 0.0), 1.0))


@dataclass(frozen=True, slots=True)
class FilterResult:
    passed: tuple[str, ...]
    #: judged and too small: node -> reason
    failed: Mapping[str, str]
    #: not judged (passed all the same): node -> reason, for the log
    unjudged: Mapping[str, str]


def offers_of(
    nodes: Sequence[str], nrts: Mapping[str, Mapping[str, Any]]
) -> dict[str, Offer | Unjudged]:
    """`node_offer` of each of `nodes` from its object in `nrts` (the extender's cache
    keeps them parsed instead, one parse per object change)."""
    return {n: node_offer(n, nrts.get(n)) for n in nodes}


def _offer(node: str, offers: Mapping[str, Offer | Unjudged]) -> Offer | Unjudged:
    got = offers.get(node)
    return got if got is not None else node_offer(node, None)


def filter_nodes(
    pod: Mapping[str, Any], nodes: Sequence[str], offers: Mapping[str, Offer | Unjudged]
) -> FilterResult:
    """The candidates that hold `pod`, by their `offers` (module docstring)."""
    try:
        demand = pod_demand(pod)
    except PodError as exc:
        return FilterResult(tuple(nodes), {}, {n: str(exc) for n in nodes})
    passed, failed, unjudged = [], {}, {}
    for node in nodes:
        offer = _offer(node, offers)
        if isinstance(offer, Unjudged):
            if demand.any:
                unjudged[node] = offer.reason
            passed.append(node)
            continue
        verdict = judge(demand, offer)
        if verdict.fits:
            passed.append(node)
        else:
            failed[node] = verdict.reason
    return FilterResult(tuple(passed), failed, unjudged)


def prioritize(
    pod: Mapping[str, Any],
    nodes: Sequence[str],
    offers: Mapping[str, Offer | Unjudged],
    strategy: Strategy,
) -> dict[str, int]:
    """A score per candidate node (module docstring)."""
    try:
        demand = pod_demand(pod)
    except PodError:
        return dict.fromkeys(nodes, 0)
    out = {}
    for node in nodes:
        offer = _offer(node, offers)
        if isinstance(offer, Unjudged):
            out[node] = 0
            continue
        out[node] = score(demand, offer, judge(demand, offer), strategy)
    return out
