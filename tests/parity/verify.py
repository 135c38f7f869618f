"""Their `verify` in our code: what each container may use, named the way their e2e names it.

nri-plugins' e2e ``verify 'EXPR'`` evaluates EXPR over per-container sets read from the
running VM (their ``run.sh`` and ``lib/topology.py``): ``cpus["pod0c0"]`` is a set like
``{"cpu04", "cpu05"}``, ``mems`` a set of node names, ``nodes``, ``packages``, ``dies``,
``cores`` and ``threads`` the topology elements of the allowed CPUs.  Names are zero-padded
to the widest id of their kind (``cpu04`` on a 16-CPU machine, ``cpu4095`` on 4,096).
`allowed` builds the same sets from a simulator step, so each of their verify lines becomes
one Python expression over an `Allowed` (`tests.parity.ports` evaluates them;
`tests.parity.suite` builds the steps the way their ``create`` does).

A container with no cpuset (or no memset) may use every online CPU (every memory node),
as on the VM.  Their ``cores`` names a core by its rank within its die (QEMU's core_id on
the machines of their suite); ``dies`` by its rank within its package.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_resmgr.simulator.results import ContainerReport
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology

__all__ = [
    "Allowed",
    "allowed",
    "core_ids",
    "cpu_ids",
    "die_ids",
    "disjoint_sets",
    "node_ids",
    "package_ids",
]

Sets = dict[str, set[str]]


@dataclass(frozen=True)
class Allowed:
    """Per container name (``pod0c0``): the sets their verify expressions see."""

    cpus: Sets
    mems: Sets
    nodes: Sets
    packages: Sets
    dies: Sets
    cores: Sets
    threads: Sets
    #: errors of every step so far (a refused container is missing from the sets)
    errors: tuple[str, ...] = ()
    #: the simulator's row per container name, for messages and pool checks
    rows: Mapping[str, ContainerReport] = field(default_factory=dict)


def _width(ids: Iterable[int]) -> int:
    return max((len(str(i)) for i in ids), default=1)


def allowed(
    topology: Topology, containers: Mapping[str, ContainerReport], errors: Iterable[str] = ()
) -> Allowed:
    """The verify sets of every container of a step (keys ``pod/container``)."""
    online = topology.online_cpus()
    cpus_of = {c: topology.cpu(c) for c in online}
    die_rank: dict[int, int] = {}
    for pkg in topology.package_ids():
        for i, die in enumerate(topology.die_ids(pkg)):
            die_rank[die] = i
    core_rank: dict[int, int] = {}
    by_die: dict[int, list[int]] = {}
    for core in topology.core_ids():
        first = min(topology.core_cpus(core))
        by_die.setdefault(cpus_of[first].die_id, []).append(core)
    for cores in by_die.values():
        for i, core in enumerate(sorted(cores, key=lambda c: min(topology.core_cpus(c)))):
            core_rank[core] = i
    thread_rank = {
        cpu: i
        for core in topology.core_ids()
        for i, cpu in enumerate(sorted(topology.core_cpus(core)))
    }
    w_cpu = _width(online)
    w_pkg = _width(topology.package_ids())
    w_die = _width(die_rank.values())
    w_node = _width(topology.node_ids(with_cpus=True))
    w_core = _width(core_rank.values())
    w_thread = _width(thread_rank.values())
    all_mems = IDSet(n.id for n in topology.nodes.values() if n.memory_bytes)

    def node_name(n: int) -> str:
        return f"node{n:0{w_node}d}"

    sets: dict[str, Sets] = {
        k: {} for k in ("cpus", "mems", "nodes", "packages", "dies", "cores", "threads")
    }
    rows: dict[str, ContainerReport] = {}
    for key, row in containers.items():
        name = key.rsplit("/", 1)[-1]
        if name in rows:
            raise AssertionError(f"container name {name!r} is ambiguous: {key} and another pod")
        rows[name] = row
        cpus = IDSet.parse(row.cpus) & online if row.cpus else online
        mems = IDSet.parse(row.mems) if row.mems else all_mems
        out = {k: set[str]() for k in sets}
        out["mems"] = {node_name(n) for n in mems}
        for c in cpus:
            cpu = cpus_of[c]
            pkg_name = f"package{cpu.package_id:0{w_pkg}d}"
            node = node_name(cpu.node_id)
            core_name = f"{node}/core{core_rank[cpu.core_id]:0{w_core}d}"
            out["cpus"].add(f"cpu{c:0{w_cpu}d}")
            out["packages"].add(pkg_name)
            out["dies"].add(f"{pkg_name}/die{die_rank[cpu.die_id]:0{w_die}d}")
            out["nodes"].add(node)
            out["cores"].add(core_name)
            out["threads"].add(f"{core_name}/thread{thread_rank[c]:0{w_thread}d}")
        for k, v in out.items():
            sets[k][name] = v
    return Allowed(**sets, errors=tuple(errors), rows=rows)


# ---- their helpers over names (run.sh: set_ids, disjoint_sets) -----------------------------


def _ids(names: Iterable[str], letters: str) -> set[Any]:
    out: set[Any] = set()
    for name in names:
        parts = tuple(int(re.sub(f"[{letters}]", "", p)) for p in name.split("/"))
        out.add(parts if len(parts) > 1 else parts[0])
    return out


def cpu_ids(names: Iterable[str]) -> set[int]:
    """``{"cpu04", "cpu05"}`` -> ``{4, 5}``."""
    return _ids(names, "cpu")


def node_ids(names: Iterable[str]) -> set[int]:
    return _ids(names, "node")


def package_ids(names: Iterable[str]) -> set[int]:
    return _ids(names, "package")


def die_ids(names: Iterable[str]) -> set[tuple[int, int]]:
    return _ids(names, "packagedie")


def core_ids(names: Iterable[str]) -> set[tuple[int, int]]:
    return _ids(names, "nodecore")


def disjoint_sets(*sets: set[str]) -> bool:
    """No element in two of the sets."""
    seen: set[str] = set()
    for s in sets:
        if not seen.isdisjoint(s):
            return False
        seen |= s
    return True
