"""Random create/remove sequences for the topology-aware policy's property tests.

`SYNTHETIC` names the synthetic machines the sequences run on (two packages, one
package, dies with split L3 and isolated CPUs, PMEM and HBM nodes); `OPS` draws a
sequence of `Op`\\ s (create or remove one of ten slots, every QoS class, whole and
fractional requests, memory, the CPU and memory annotations, kube-system and init
containers); `make` turns an `Op` into the `ContainerInfo` the policy is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from nri_resmgr.model import ContainerInfo, ContainerKind, QoSClass
from nri_resmgr.policy.topology_aware.preferences import (
    CPU_PRESERVE,
    HIDE_HYPERTHREADS,
    MEMORY_PRESERVE,
    MEMORY_TYPE,
    PREFER_ISOLATED,
    PREFER_SHARED,
)
from tests.support.builders import ctr

__all__ = ["ANNOTATIONS", "OPS", "SYNTHETIC", "Op", "make"]

SYNTHETIC = {
    "2s2n2c2t": {"packages": 2, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G"},
    "1s1n4c2t": {"packages": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "4G"},
    "1s2d-l3-isolated": {
        "packages": 1, "dies": 2, "nodes": 1, "cores": 4, "threads": 2, "l3_per_die": 2,
        "isolated": "3,7,11,15", "memory": "2G",
    },
    "pmem-hbm": {
        "packages": 1, "nodes": 2, "cores": 3, "threads": 2, "memory": "2G",
        "extra_memory_nodes": [
            {"kind": "pmem", "memory": "8G", "attach": 0},
            {"kind": "hbm", "memory": "1G", "attach": 1},
        ],
    },
}

ANNOTATIONS = st.dictionaries(
    st.sampled_from(
        [PREFER_ISOLATED, PREFER_SHARED, HIDE_HYPERTHREADS, MEMORY_TYPE, CPU_PRESERVE,
         MEMORY_PRESERVE]
    ),
    st.sampled_from(["true", "false"]),
    max_size=2,
).map(lambda d: {k: ("dram,pmem" if v == "true" else "mixed") if k == MEMORY_TYPE else v
                 for k, v in d.items()})


@dataclass(frozen=True)
class Op:
    create: bool
    slot: int
    qos: QoSClass
    milli: int
    system: bool
    init: bool
    memory: int
    annotations: dict[str, str]


OPS = st.lists(
    st.builds(
        Op,
        create=st.booleans() | st.just(True),
        slot=st.integers(0, 9),
        qos=st.sampled_from(list(QoSClass)),
        milli=st.sampled_from([0, 250, 1000, 1500, 2000, 2500, 3000, 4000, 6000]),
        system=st.sampled_from([False, False, False, True]),
        init=st.booleans(),
        memory=st.sampled_from([0, 0, 256 << 20, 1 << 30]),
        annotations=ANNOTATIONS,
    ),
    max_size=25,
)


def make(op: Op) -> ContainerInfo:
    name = f"c{op.slot}"
    return ctr(
        name,
        pod=f"pod{op.slot % 5}",
        ns="kube-system" if op.system else "default",
        qos=op.qos,
        milli=0 if op.qos is QoSClass.BEST_EFFORT else op.milli,
        mem=op.memory if op.qos is not QoSClass.BEST_EFFORT else None,
        ann=op.annotations,
        kind=ContainerKind.INIT if op.init else ContainerKind.APP,
        cid=name,
    )
