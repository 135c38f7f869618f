"""Domain values as a policy sees them: containers and machines, synthetic and real.

`ctr(...)` makes a `ContainerInfo` from the few facts a policy test cares about;
`topo(spec)` builds a synthetic machine; `snapshots()` lists the real machines in
../shared/topologies (unpacked and discovered with the daemon's own code).  `BE`, `BU`
and `GU` are the QoS classes' short names the policy tables use.
"""

from __future__ import annotations

import functools
import json
import lzma
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from nri_resmgr.model import (
    ContainerID,
    ContainerInfo,
    ContainerKind,
    Pod,
    PodID,
    QoSClass,
    Request,
)
from nri_resmgr.topology.cpuset import CPUSet, IDSet, NodeSet
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import build_topology
from tests.support.requirements import TOPOLOGIES

BE = QoSClass.BEST_EFFORT
BU = QoSClass.BURSTABLE
GU = QoSClass.GUARANTEED

#: 2 packages x 2 nodes x 2 cores x 2 threads: CPU n and n+8 are siblings,
#: node0 = 0-1,8-9  node1 = 2-3,10-11  node2 = 4-5,12-13  node3 = 6-7,14-15
SPEC_2S2N = {"packages": 2, "dies": 1, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G"}


def topo(**spec: object) -> Topology:
    """A synthetic machine (built once per distinct spec)."""
    return _topo(json.dumps(spec, sort_keys=True))


@functools.cache
def _topo(spec: str) -> Topology:
    return build_topology(json.loads(spec))


def small() -> Topology:
    return topo(**SPEC_2S2N)


def hbm_cxl() -> Topology:
    """nri-plugins' memory-policy e2e machine (n6-hbm-cxl): two packages of one CPU node
    each (CPUs 0-1,4-5 and 2-3,6-7), an HBM node near each (nodes 2 and 3, distance 15)
    and a CXL node near each (4 and 5, distance 60)."""
    return topo(
        packages=2,
        dies=1,
        nodes=1,
        cores=2,
        threads=2,
        memory="2G",
        extra_memory_nodes=[
            {"kind": "hbm", "memory": "1G", "attach": 0, "distances": {0: 15, 1: 30}},
            {"kind": "hbm", "memory": "1G", "attach": 1, "distances": {0: 30, 1: 15}},
            {"kind": "cxl", "memory": "4G", "attach": 0, "distances": {0: 60, 1: 70}},
            {"kind": "cxl", "memory": "4G", "attach": 1, "distances": {0: 70, 1: 60}},
        ],
    )


def ctr(
    name: str = "c",
    *,
    pod: str = "p",
    ns: str = "default",
    qos: QoSClass = QoSClass.GUARANTEED,
    milli: int = 0,
    limit: int | None = None,
    mem: int | None = None,
    ann: Mapping[str, str] | None = None,
    kind: ContainerKind = ContainerKind.APP,
    cur: str | None = None,
    cur_mems: str | None = None,
    cid: str | None = None,
) -> ContainerInfo:
    """A container; `milli` is the CPU request, `cur` the runtime's current cpuset."""
    if limit is None and qos is QoSClass.GUARANTEED:
        limit = milli
    return ContainerInfo(
        id=ContainerID(cid or f"{pod}-{name}"),
        name=name,
        pod=Pod(
            id=PodID(f"{ns}-{pod}"),
            uid=f"uid-{ns}-{pod}",
            name=pod,
            namespace=ns,
            qos_class=qos,
            annotations=dict(ann or {}),
        ),
        request=Request(
            cpu_request_milli=milli,
            cpu_limit_milli=limit,
            memory_request=mem,
            memory_limit=mem,
        ),
        kind=kind,
        current_cpus=None if cur is None else IDSet.parse(cur),
        current_mems=None if cur_mems is None else IDSet.parse(cur_mems),
    )


def with_current(c: ContainerInfo, cpus: CPUSet | None, mems: NodeSet | None) -> ContainerInfo:
    """`c` as the runtime would report it after applying cpus/mems."""
    return replace(c, current_cpus=cpus, current_mems=mems)


@functools.cache
def snapshot(name: str) -> Topology:
    """Discover one real machine from its archive (unpacked once per session)."""
    archive = TOPOLOGIES / name
    root = Path(tempfile.mkdtemp(prefix="nri-resmgr-topo-"))
    with lzma.open(archive) as raw, tarfile.open(fileobj=raw) as tar:
        tar.extractall(root, filter="data")
    candidates = [p.parent for p in root.rglob("sys") if (p / "devices/system/cpu").is_dir()]
    return discover(candidates[0] if candidates else root)


def snapshot_names() -> list[str]:
    return sorted(p.name for p in TOPOLOGIES.glob("*.tar.xz")) if TOPOLOGIES.is_dir() else []
