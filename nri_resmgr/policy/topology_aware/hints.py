"""Topology hints: where a container's devices and mounts are, and what the policy does
with it.

Theory of operation
-------------------
The shell resolves the locality of a container's devices and mounts from sysfs
(`nri_resmgr.topology.devices`) and hands it over as `ContainerInfo.topology_hints`;
everything here is pure.  `container_hints` turns those, filtered and extended by the
container's effective annotations, into `Hints` on this machine:

==================================================  ======================================
annotation (``KEY.resource-policy.nri.io``)         effect
==================================================  ======================================
``topologyhints``                                   ``false``/``none``: no hints;
                                                    ``true``/``all``: all; else a comma list
                                                    of ``devices``, ``mounts``,
                                                    ``pod-resources`` (kubelet devices)
``test.topologyhints``                              YAML ``{NAME: {CPUs, NUMAs, Sockets}}``:
                                                    hints injected as if from a device
                                                    (nri-plugins' test API; their e2e
                                                    suite uses it); only the first YAML
                                                    document is read, as Go's decoder does
``strict.topologyhints``                            bool: a grant that leaves a hint
                                                    unsatisfied fails the container
``pick-resources-by-hints``                         bool: exclusive CPUs are picked from
                                                    the hints' CPUs first
==================================================  ======================================

A hint's CPUs are its own (``local_cpulist``) or else those of its NUMA nodes or sockets;
its nodes are its own or else those of its CPUs.  The policy uses them three ways:

* **pool choice**: `hinted_pool` is the deepest pool whose CPUs cover every hint's CPUs,
  which goes first in the sort key (`scoring`, component 1) when it can fit;
* **picking** (``pick-resources-by-hints``): the hints' CPUs are the preferred tier when
  exclusive CPUs are sliced (`pick_preference`);
* **strict** (``strict.topologyhints``): `check_strict` fails the container, with
  "fail strict hint" and the offending CPUs or memory nodes, when the rendered CPUs or
  memory nodes are not all within every hint's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from nri_resmgr.limits import shown
from nri_resmgr.model import (
    ANNOTATION_DOMAIN,
    AllocationError,
    AnnotationError,
    Assignment,
    ContainerInfo,
    HintSource,
)
from nri_resmgr.policy.common import parse_bool_annotation
from nri_resmgr.policy.topology_aware.pools import PoolTree
from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError, NodeSet, union
from nri_resmgr.topology.model import Topology

__all__ = [
    "PICK_BY_HINTS",
    "STRICT_HINTS",
    "TEST_HINTS",
    "TOPOLOGY_HINTS",
    "Hint",
    "Hints",
    "check_strict",
    "container_hints",
    "hinted_pool",
    "pick_preference",
]

TOPOLOGY_HINTS = f"topologyhints.{ANNOTATION_DOMAIN}"
TEST_HINTS = f"test.topologyhints.{ANNOTATION_DOMAIN}"
STRICT_HINTS = f"strict.topologyhints.{ANNOTATION_DOMAIN}"
PICK_BY_HINTS = f"pick-resources-by-hints.{ANNOTATION_DOMAIN}"

#: the longest test hint annotation read, and its deepest nesting
MAX_TEST_HINTS_LENGTH = 16384
MAX_DEPTH = 4
_TYPES = {
    "devices": frozenset({HintSource.DEVICES}),
    "mounts": frozenset({HintSource.MOUNTS}),
    "pod-resources": frozenset({HintSource.POD_RESOURCES}),
    "all": frozenset({HintSource.DEVICES, HintSource.MOUNTS, HintSource.POD_RESOURCES}),
    "none": frozenset[HintSource](),
}
_BOOLS = {"true": True, "1": True, "t": True, "false": False, "0": False, "f": False}


@dataclass(frozen=True, slots=True)
class Hint:
    """One hint on this machine: the CPUs and NUMA nodes that are local to it."""

    provider: str
    cpus: CPUSet
    nodes: NodeSet

    def describe(self) -> str:
        return f"{self.provider} (cpus {self.cpus}, nodes {self.nodes})"


@dataclass(frozen=True, slots=True)
class Hints:
    """A container's hints and what it asked done with them."""

    hints: tuple[Hint, ...] = ()
    strict: bool = False
    pick: bool = False


def _sources(container: ContainerInfo) -> frozenset[HintSource]:
    raw = container.annotation(TOPOLOGY_HINTS)
    if raw is None:
        return _TYPES["all"]
    text = raw.strip().lower()
    if text in _BOOLS:
        return _TYPES["all"] if _BOOLS[text] else _TYPES["none"]
    out: set[HintSource] = set()
    for word in (w.strip() for w in text.split(",")):
        if word == "none":
            return frozenset()
        if word not in _TYPES:
            raise AnnotationError(
                f"{container.pretty}: annotation {TOPOLOGY_HINTS} has unknown type {shown(word)}; "
                f"expected true, false or a list of {', '.join(_TYPES)}"
            )
        out |= _TYPES[word]
    return frozenset(out)


def _ids(container: ContainerInfo, where: str, value: object, known: IDSet) -> IDSet:
    text = str(value)
    cut = repr(text if len(text) <= 40 else text[:37] + "...")
    try:
        ids = IDSet.parse(text)
    except IDSetError as exc:
        raise AnnotationError(
            f"{container.pretty}: annotation {TEST_HINTS}: {where} is {cut}; expected a "
            f"kernel id list such as 0-3,8: {exc}"
        ) from exc
    if not ids <= known:
        raise AnnotationError(
            f"{container.pretty}: annotation {TEST_HINTS}: {where} is {cut}; expected "
            f"ids of this machine ({known}), found {ids - known} beyond"
        )
    return ids


#: the event parser of the depth check: libyaml's where PyYAML has it (pure Python, the
#: scanner looks ahead up to 1,024 characters for a simple key at every flow opening, so
#: 2,000 ``[`` cost 0.15 s, and over a second on a loaded node: the event loop's time)
_EVENTS: type[yaml.BaseLoader] = getattr(yaml, "CBaseLoader", yaml.BaseLoader)


def _check_depth(text: str) -> None:
    """Raise `yaml.YAMLError` when the first document nests deeper than `MAX_DEPTH` (the
    composer recurses; the parser, walked here, does not) or uses an alias (``*a``: a
    few kilobytes of aliases repeat to billions of values; hints have no use for them)."""
    depth = 0
    for event in yaml.parse(text, Loader=_EVENTS):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.YAMLError(f"expected no aliases, found *{event.anchor}")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.DocumentEndEvent):
            return


def _first_yaml_document(container: ContainerInfo, text: str) -> object:
    """The first YAML document of `text`, every scalar a string (`yaml.BaseLoader`: no
    numbers to convert, which also keeps a 10,000-digit "number" a string)."""
    loader: yaml.BaseLoader | None = None
    try:
        # the loader checks the characters when it is made: a NUL is a ReaderError there
        loader = yaml.BaseLoader(text)
        _check_depth(text)
        node = loader.get_node() if loader.check_node() else None
        return loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise AnnotationError(
            f"{container.pretty}: annotation {TEST_HINTS}: expected YAML "
            f"{{NAME: {{CPUs: LIST, NUMAs: LIST, Sockets: LIST}}}}, found {text[:80]!r}: {exc}"
        ) from exc
    finally:
        if loader is not None:
            loader.dispose()


def _test_hints(container: ContainerInfo, topology: Topology) -> list[Hint]:
    text = container.annotation(TEST_HINTS)
    if text is None:
        return []
    if len(text) > MAX_TEST_HINTS_LENGTH:
        raise AnnotationError(
            f"{container.pretty}: annotation {TEST_HINTS}: expected at most "
            f"{MAX_TEST_HINTS_LENGTH} characters, found {len(text)}"
        )
    doc = _first_yaml_document(container, text)
    if doc is None:
        return []
    if not isinstance(doc, Mapping):
        raise AnnotationError(
            f"{container.pretty}: annotation {TEST_HINTS}: expected a mapping of hint names "
            f"to {{CPUs, NUMAs, Sockets}}, found {type(doc).__name__}"
        )
    out = []
    for name, body in doc.items():
        if not isinstance(body, Mapping):
            raise AnnotationError(
                f"{container.pretty}: annotation {TEST_HINTS}: hint {shown(name)}: expected a "
                f"mapping with CPUs, NUMAs or Sockets, found {shown(body)}"
            )
        fields = {str(k).lower(): v for k, v in body.items()}
        unknown = set(fields) - {"provider", "cpus", "numas", "sockets"}
        if unknown:
            raise AnnotationError(
                f"{container.pretty}: annotation {TEST_HINTS}: hint {shown(name)} has unknown "
                f"fields {sorted(unknown)}; expected CPUs, NUMAs, Sockets (and Provider)"
            )
        provider = str(fields.get("provider") or name)
        known = {
            "cpus": IDSet(topology.cpus),
            "numas": IDSet(topology.nodes),
            "sockets": IDSet(c.package_id for c in topology.cpus.values()),
        }
        ids = {
            key: _ids(container, f"{name}.{label}", fields[key], known[key])
            if fields.get(key)
            else IDSet()
            for key, label in (("cpus", "CPUs"), ("numas", "NUMAs"), ("sockets", "Sockets"))
        }
        cpus, nodes, sockets = ids["cpus"], ids["numas"], ids["sockets"]
        if sockets:
            cpus = cpus or IDSet(c.id for c in topology.cpus.values() if c.package_id in sockets)
        out.append(_complete(provider, cpus, nodes, topology))
    return out


def _complete(provider: str, cpus: CPUSet, nodes: NodeSet, topology: Topology) -> Hint:
    """A hint with both its CPUs and its nodes (each derived from the other if absent)."""
    cpus, nodes = cpus & IDSet(topology.cpus), nodes & IDSet(topology.nodes)
    if not cpus:
        cpus = union(topology.node_cpus(n) for n in nodes)
    if not nodes:
        nodes = IDSet(topology.cpus[c].node_id for c in cpus)
    return Hint(provider=provider, cpus=cpus, nodes=nodes)


def container_hints(container: ContainerInfo, topology: Topology) -> Hints:
    """The container's hints on `topology`, filtered and extended by its annotations."""
    sources = _sources(container)
    hints = [
        _complete(h.provider, h.cpus, h.nodes, topology)
        for h in container.topology_hints
        if h.source in sources
    ]
    if sources:
        hints.extend(_test_hints(container, topology))
    return Hints(
        hints=tuple(h for h in hints if h.cpus or h.nodes),
        strict=parse_bool_annotation(container, STRICT_HINTS) is True,
        pick=parse_bool_annotation(container, PICK_BY_HINTS) is True,
    )


def hinted_pool(tree: PoolTree, hints: Hints) -> int | None:
    """The deepest pool whose CPUs cover every hint's CPUs (None without hints, or when
    no pool holds them all)."""
    wanted = union(h.cpus for h in hints.hints)
    if not wanted:
        return None
    best: int | None = None
    best_depth = -1
    for pool in tree.pools:
        if wanted <= pool.cpus and pool.depth > best_depth:
            best, best_depth = pool.index, pool.depth
    return best


def pick_preference(hints: Hints) -> Sequence[CPUSet]:
    """The CPU tiers to slice exclusive CPUs from first (``pick-resources-by-hints``)."""
    if not hints.pick or not hints.hints:
        return ()
    return (union(h.cpus for h in hints.hints),)


def check_strict(container: ContainerInfo, hints: Hints, assignment: Assignment) -> None:
    """Raise `AllocationError` when a strict container's CPUs or memory nodes are not all
    within every hint's (nothing to check when not strict or unpinned)."""
    if not hints.strict:
        return
    for h in hints.hints:
        if assignment.cpus and not assignment.cpus <= h.cpus:
            raise AllocationError(
                f"{container.pretty}: granted {assignment.kind} CPUs "
                f"{assignment.cpus - h.cpus} fail strict hint {h.describe()}"
            )
        if assignment.mems and not assignment.mems <= h.nodes:
            raise AllocationError(
                f"{container.pretty}: granted memory nodes {assignment.mems - h.nodes} "
                f"fail strict hint {h.describe()}"
            )
