"""Show a topology to a human (a tree) or to a program (a JSON-ready dict).

Theory of operation: both views are pure functions of a `Topology`.  The tree follows
the hardware nesting, machine → package → die → NUMA node → L3 domain → core → threads,
and includes offline CPUs (marked ``offline``) so a report shows the whole machine; an
L3 domain that spans several nodes (sub-NUMA clustering) is shown under each node with
that node's share of its CPUs.  CPU-less memory nodes appear under the CPU node they are
attached to, network devices under their node (or at the machine level when unknown).

`to_dict` is the stable machine-readable form: counts (``packages``, ``dies``,
``cores`` = physical cores with an online thread, ``threads`` = online CPUs), kernel CPU
list strings (``online``, ``isolated``, ``offline``), ``numa_nodes``, ``l3_caches``,
``netdevs``, ``pci_devices`` (the PCI functions a policy may name by sysfs path, with
their local CPUs and node) and a nested ``package_tree``.
"""

from __future__ import annotations

from typing import Any

from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import CPU, CoreType, Topology

__all__ = ["format_bytes", "render_tree", "to_dict"]


def format_bytes(n: int) -> str:
    """A human size in binary units (``31.6 GiB``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _node_package(topo: Topology, node: int) -> int | None:
    cpu_node = topo.closest_cpu_node(node) if topo.node_ids(with_cpus=True) else node
    pkgs = {topo.cpus[c].package_id for c in topo.node_cpus(cpu_node)}
    return min(pkgs) if pkgs else None


def to_dict(topo: Topology) -> dict[str, Any]:
    """The JSON view of a topology."""
    with_cpus = set(topo.node_ids(with_cpus=True))
    numa_nodes = []
    for n in topo.nodes.values():
        numa_nodes.append(
            {
                "id": n.id,
                "cpus": str(n.cpus),
                "online_cpus": str(topo.node_cpus(n.id)),
                "memory_bytes": n.memory_bytes,
                "kind": n.kind.value,
                "distances": [topo.distance(n.id, m) for m in topo.nodes],
                "hugepages": {str(k): v for k, v in sorted(n.hugepages.items())},
                "package": _node_package(topo, n.id) if with_cpus else None,
                "attached_to": (
                    topo.closest_cpu_node(n.id) if with_cpus and n.id not in with_cpus else None
                ),
            }
        )
    l3_caches = [
        {
            "id": l3,
            "cpus": str(topo.l3_cpus(l3)),
            "nodes": str(topo.l3_nodes(l3)),
            "dies": sorted({topo.cpus[c].die_id for c in topo.l3_cpus(l3)}),
        }
        for l3 in topo.l3_ids()
    ]
    package_tree = [
        {
            "id": pkg,
            "cpus": str(topo.package_cpus(pkg)),
            "nodes": str(topo.package_nodes(pkg)),
            "dies": [
                {
                    "id": die,
                    "cpus": str(topo.die_cpus(die)),
                    "nodes": str(topo.die_nodes(die)),
                    "l3_caches": topo.l3_ids(die),
                }
                for die in topo.die_ids(pkg)
            ],
        }
        for pkg in topo.package_ids()
    ]
    core_types = {
        kind: str(topo.core_type_cpus(kind))
        for kind in (CoreType.PERFORMANCE, CoreType.EFFICIENT)
        if topo.core_type_cpus(kind)
    }
    return {
        "source": topo.source,
        "packages": len(topo.package_ids()),
        "dies": len(topo.die_ids()),
        "cores": len(topo.core_ids()),
        "threads": len(topo.online_cpus()),
        "threads_per_core": topo.threads_per_core(),
        "online": str(topo.online_cpus()),
        "isolated": str(topo.isolated_cpus()),
        "offline": str(topo.offline_cpus()),
        "core_types": core_types,
        "numa_nodes": numa_nodes,
        "l3_caches": l3_caches,
        "netdevs": [
            {"name": d.name, "node": d.node_id, "pci_address": d.pci_address} for d in topo.netdevs
        ],
        "pci_devices": [
            {"address": f.address, "path": f.path, "cpus": str(f.cpus), "node": f.node_id}
            for f in topo.pci_devices
        ],
        "package_tree": package_tree,
    }


# ---- the tree ------------------------------------------------------------------------


class _Tree:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, prefix: str, last: bool, text: str) -> str:
        self.lines.append(f"{prefix}{'└─ ' if last else '├─ '}{text}")
        return prefix + ("   " if last else "│  ")


def _thread(cpu: CPU) -> str:
    marks = [m for m, on in (("isolated", cpu.isolated), ("offline", not cpu.online)) if on]
    return f"cpu {cpu.id}" + (f" ({', '.join(marks)})" if marks else "")


def _group(cpus: list[CPU], key: str) -> dict[int, list[CPU]]:
    out: dict[int, list[CPU]] = {}
    for c in sorted(cpus, key=lambda c: c.id):
        out.setdefault(getattr(c, key), []).append(c)
    return dict(sorted(out.items()))


def _node_label(topo: Topology, node: int) -> str:
    n = topo.nodes[node]
    parts = [n.kind.value, format_bytes(n.memory_bytes)]
    pages = ", ".join(f"{size}kBx{count}" for size, count in sorted(n.hugepages.items()) if count)
    if pages:
        parts.append(f"hugepages {pages}")
    return f"node {node} ({', '.join(parts)})"


def summarize(topo: Topology) -> str:
    """``2 package(s), 2 die(s), 4 node(s), 8 core(s), 16 thread(s)``."""
    return (
        f"{len(topo.package_ids())} package(s), {len(topo.die_ids())} die(s), "
        f"{len(topo.nodes)} node(s), {len(topo.core_ids())} core(s), "
        f"{len(topo.online_cpus())} thread(s)"
    )


def render_tree(topo: Topology) -> str:
    """The topology as an indented tree, one line per element."""
    tree = _Tree()
    all_cpus = list(topo.cpus.values())
    tree.lines.append(f"machine{f' {topo.source}' if topo.source else ''}: {summarize(topo)}")
    extras = []
    if topo.isolated_cpus():
        extras.append(f"isolated {topo.isolated_cpus()}")
    if topo.offline_cpus():
        extras.append(f"offline {topo.offline_cpus()}")
    if extras:
        tree.lines.append("  " + "; ".join(extras))
    cpu_nodes = topo.node_ids(with_cpus=True)
    attached: dict[int, list[int]] = {}
    for n in topo.node_ids(with_cpus=False):
        if cpu_nodes:
            attached.setdefault(topo.closest_cpu_node(n), []).append(n)
    nets: dict[int | None, list[str]] = {}
    for d in topo.netdevs:
        nets.setdefault(d.node_id, []).append(
            f"netdev {d.name}" + (f" ({d.pci_address})" if d.pci_address else "")
        )
    packages = _group(all_cpus, "package_id")
    top_items: list[tuple[str, Any]] = [("pkg", p) for p in packages]
    top_items += [("net", s) for s in nets.get(None, [])]
    top_items += [("orphan", n) for n in topo.node_ids(with_cpus=False) if not cpu_nodes]
    for i, (kind, item) in enumerate(top_items):
        last = i == len(top_items) - 1
        if kind == "net":
            tree.add("", last, str(item))
            continue
        if kind == "orphan":
            tree.add("", last, _node_label(topo, int(item)) + " (no CPU node)")
            continue
        pkg_cpus = packages[item]
        p_prefix = tree.add("", last, f"package {item}: cpus {IDSet(c.id for c in pkg_cpus)}")
        dies = _group(pkg_cpus, "die_id")
        for di, (die, die_cpus) in enumerate(dies.items()):
            d_prefix = tree.add(
                p_prefix, di == len(dies) - 1, f"die {die}: cpus {IDSet(c.id for c in die_cpus)}"
            )
            nodes = _group(die_cpus, "node_id")
            for ni, (node, node_cpus) in enumerate(nodes.items()):
                n_prefix = tree.add(
                    d_prefix,
                    ni == len(nodes) - 1,
                    f"{_node_label(topo, node)}: cpus {IDSet(c.id for c in node_cpus)}",
                )
                children: list[tuple[str, Any]] = [("mem", m) for m in attached.get(node, [])]
                children += [("net", s) for s in nets.get(node, [])]
                l3s = _group(node_cpus, "l3_id")
                children += [("l3", l3) for l3 in l3s]
                for ci, (ckind, citem) in enumerate(children):
                    clast = ci == len(children) - 1
                    if ckind == "mem":
                        tree.add(
                            n_prefix,
                            clast,
                            f"memory {_node_label(topo, citem)}, distance "
                            f"{topo.distance(node, citem)}",
                        )
                    elif ckind == "net":
                        tree.add(n_prefix, clast, str(citem))
                    else:
                        _render_l3(tree, topo, n_prefix, clast, citem, l3s[citem])
    return "\n".join(tree.lines)


def _render_l3(
    tree: _Tree, topo: Topology, prefix: str, last: bool, l3: int, cpus: list[CPU]
) -> None:
    label = f"L3 {l3}: cpus {IDSet(c.id for c in cpus)}"
    if any(c.online for c in cpus) and len(topo.l3_nodes(l3)) > 1:
        label += f" (shared with nodes {topo.l3_nodes(l3)})"
    l_prefix = tree.add(prefix, last, label)
    cores = _group(cpus, "core_id")
    for i, (core, threads) in enumerate(cores.items()):
        ctype = threads[0].core_type
        tag = {CoreType.PERFORMANCE: " [P]", CoreType.EFFICIENT: " [E]"}.get(ctype, "")
        tree.add(
            l_prefix,
            i == len(cores) - 1,
            f"core {core}{tag}: " + ", ".join(_thread(t) for t in threads),
        )
