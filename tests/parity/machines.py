"""nri-plugins' e2e machines as synthetic specs, and their topology-aware default config.

Each spec builds, through `nri_resmgr.topology.synthetic`, the machine QEMU builds from the
``topology.var.json`` of the same name in nri-plugins' ``test/e2e/policies.test-suite/``:
QEMU numbers CPUs core by core (``numbering: qemu``: the two threads of a core are adjacent
ids), so the CPU ids their ``verify`` expressions name are the ids here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["N4C16", "N4C128", "N6_HBM_CXL", "N6_HBM_CXL_CONSTS", "S8C4K", "helm_config"]

#: 2 packages x 2 nodes x 2 cores x 2 threads, 2G per node: cpus 0-3 node0 ... 12-15 node3
N4C16: dict[str, Any] = {
    "packages": 2,
    "nodes": 2,
    "cores": 2,
    "threads": 2,
    "memory": "2G",
    "numbering": "qemu",
}
#: 2 packages x 2 nodes x 16 cores x 2 threads (128 CPUs)
N4C128: dict[str, Any] = {
    "packages": 2,
    "nodes": 2,
    "cores": 16,
    "threads": 2,
    "memory": "2G",
    "numbering": "qemu",
}
#: 2 packages of 2 cores x 2 threads with 2G DRAM each (nodes 0, 1); CPU-less 1G nodes 2, 3
#: and 4G nodes 4, 5 with QEMU's node-dist rows.  nri-plugins calls a CPU-less node smaller
#: than the average DRAM node HBM and a larger one PMEM (their py_consts: hbm0 = node2,
#: pmem0 = node4), so those are the kinds here.
N6_HBM_CXL: dict[str, Any] = {
    "packages": 2,
    "nodes": 1,
    "cores": 2,
    "threads": 2,
    "memory": "2G",
    "numbering": "qemu",
    "extra_memory_nodes": [
        {"kind": "hbm", "memory": "1G", "attach": 0, "distances": {0: 15, 1: 30, 3: 35}},
        {"kind": "hbm", "memory": "1G", "attach": 1, "distances": {0: 30, 1: 15, 2: 35}},
        {
            "kind": "pmem",
            "memory": "4G",
            "attach": 0,
            "distances": {0: 60, 1: 70, 2: 62, 3: 72, 5: 75},
        },
        {
            "kind": "pmem",
            "memory": "4G",
            "attach": 1,
            "distances": {0: 70, 1: 60, 2: 72, 3: 62, 4: 75},
        },
    ],
}
#: their n6-hbm-cxl ``py_consts.var.py``: the names their verify expressions use
N6_HBM_CXL_CONSTS: dict[str, str] = {
    "dram0": "node0",
    "dram1": "node1",
    "hbm0": "node2",
    "hbm1": "node3",
    "pmem0": "node4",
    "pmem1": "node5",
}
#: 8 packages x 512 single-thread cores (4,096 possible CPUs); booted with 3 CPUs and then
#: cpus 511, 1535 and 4095 hot-plugged (their test01-sparse-4kcpus), so six are present
S8C4K: dict[str, Any] = {
    "packages": 8,
    "cores": 512,
    "threads": 1,
    "memory": "2G",
    "numbering": "qemu",
    "present": "0-2,511,1535,4095",
}


def helm_config(**overrides: Any) -> dict[str, Any]:
    """Their ``topology-aware/helm-config.yaml.in`` with its defaults, as our policyConfig.

    Keywords are their config keys (``reservedResources``, ``colocatePods``, ...);
    their logging and instrumentation keys do not place anything and are left out.
    """
    config: dict[str, Any] = {
        "reservedResources": {"cpu": "750m"},
        "colocatePods": False,
        "colocateNamespaces": False,
        "pinCPU": True,
        "pinMemory": True,
        "preferSharedCPUs": False,
        "preferIsolatedCPUs": False,
    }
    config.update(overrides)
    return config
