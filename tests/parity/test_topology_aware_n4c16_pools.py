"""nri-plugins' topology-aware e2e suite on n4c16, test14 on (pools, classes, hints).

The rest of the machine's tests and how a port is written: `test_topology_aware_n4c16`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings

from nri_resmgr.topology.synthetic import write_sysfs
from tests.parity.fuzz_ops import FuzzPod, apply, operations
from tests.parity.machines import N4C16, helm_config
from tests.parity.ports import port
from tests.parity.suite import Suite, helm_launch

TA = "topology-aware/n4c16"


@port(f"{TA}/test14-burstable")
def test14_burstable_memory_by_request() -> None:
    """n4c16/test14-burstable, pod0-pod3: memory fits by request, limits widen the nodes
    (a pool with less memory than the limit loses; without a limit the root wins)."""
    s = helm_launch(N4C16, colocatePods=True)
    s.create("burstable", CPUREQ="1", CPULIM="2", MEMREQ="100M", MEMLIM="2.5G")
    s.create("burstable", CPUREQ="1", CPULIM="2", MEMREQ="200M", MEMLIM="5G")
    s.create("burstable", CPUREQ="1", CPULIM="2", MEMREQ="100M", MEMLIM="2.5G")
    s.create("burstable", CPUREQ="1", CPULIM="2", MEMREQ="200M", MEMLIM="0")
    s.verify(
        'len(nodes["pod0c0"]) == 2',
        'len(nodes["pod1c0"]) == 4',
        'len(nodes["pod2c0"]) == 2',
        'len(nodes["pod3c0"]) == 4',
    )


@port(f"{TA}/test14-burstable")
def test14_burstable_limits() -> None:
    """n4c16/test14-burstable, pod4-pod8: CPU limits, unlimitedBurstable and annotations."""
    s = helm_launch(N4C16, 4)
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="5", MEMREQ="100M")
    s.verify('nodes["pod4c0"] == { "node2" ,"node3" }', 'nodes["pod4c1"] == { "node0", "node1" }')
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="0", MEMREQ="100M")
    s.verify(
        'nodes["pod5c0"] == { "node0", "node1" } or nodes["pod5c0"] == { "node2", "node3" }',
        'nodes["pod5c1"] == { "node0", "node1" } or nodes["pod5c1"] == { "node2", "node3" }',
    )
    s.delete_all()
    key = "unlimited-burstable.resource-policy.nri.io/container"
    ann = {f"{key}.pod6c0": "numa", f"{key}.pod6c1": "system"}
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="0", MEMREQ="100M", annotations=ann)
    s.verify('len(nodes["pod6c0"]) == 1', 'len(nodes["pod6c1"]) == 4')
    s.delete_all()
    ann = {f"{key}.pod7c0": "numa", f"{key}.pod7c1": "die"}
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="0", MEMREQ="100M", annotations=ann)
    s.verify('len(nodes["pod7c0"]) == 1', 'len(nodes["pod7c1"]) == 2')
    s = helm_launch(N4C16, 8, unlimitedBurstable="numa")
    ann = {f"{key}.pod8c1": "die"}
    s.create("burstable", CONTCOUNT=2, CPUREQ="2", CPULIM="0", MEMREQ="100M", annotations=ann)
    s.verify('len(nodes["pod8c0"]) == 1', 'len(nodes["pod8c1"]) == 2')


@port(f"{TA}/test14-global-shared-preference")
def test14_global_shared_preference() -> None:
    """n4c16/test14-global-shared-preference: preferSharedCPUs and the per-pod opt-out."""
    s = helm_launch(N4C16, preferSharedCPUs=True)
    s.create("guaranteed", CPU="1")
    s.verify("len(cpus['pod0c0']) > 1")
    s.create("guaranteed", CPU="2")
    s.verify("len(cpus['pod1c0']) > 1")
    s.delete_all()
    opt_out = {"prefer-shared-cpus.resource-policy.nri.io/pod": "false"}
    s.create("guaranteed", CPU="1", annotations=opt_out)
    s.verify("len(cpus['pod2c0']) == 1")
    s.create("guaranteed", CPU="2", annotations=opt_out)
    s.verify("len(cpus['pod3c0']) == 2")


@port(f"{TA}/test15-busy-shared-pools")
def test15_busy_shared_pools() -> None:
    """n4c16/test15-busy-shared-pools: a node-sized container next to busy shared pools."""
    s = helm_launch(N4C16)
    s.create("besteffort", CONTCOUNT=4)
    s.create("guaranteed", CPU="4", MEM="100M")
    s.verify(
        'disjoint_sets(cpus["pod0c0"],cpus["pod0c1"],cpus["pod0c2"],cpus["pod0c3"],cpus["pod1c0"])'
    )
    s.delete_all()
    s.create("burstable", CONTCOUNT=4, CPUREQ="1m", CPULIM="750m")
    s.create("guaranteed", CPU="4", MEM="100M")
    s.verify(
        'disjoint_sets(cpus["pod2c0"],cpus["pod2c1"],cpus["pod2c2"],cpus["pod2c3"],cpus["pod3c0"])'
    )
    s.delete_all()
    s.create("burstable", CONTCOUNT=4, CPUREQ="250m", CPULIM="750m")
    s.create("guaranteed", CPU="4", MEM="100M")
    s.verify(
        'disjoint_sets(cpus["pod4c0"],cpus["pod4c1"],cpus["pod4c2"],cpus["pod4c3"],cpus["pod5c0"])'
    )


@port(f"{TA}/test16-idle-shared-pools")
def test16_idle_shared_pools() -> None:
    """n4c16/test16-idle-shared-pools: idle shared pools may be sliced empty."""
    s = helm_launch(N4C16)
    s.create("guaranteed", CPU="4", MEM="100M", CONTCOUNT=3)
    s.verify('disjoint_sets(cpus["pod0c0"],cpus["pod0c1"],cpus["pod0c2"])')
    s.verify('len(cpus["pod0c0"]) == 4', 'len(cpus["pod0c1"]) == 4', 'len(cpus["pod0c2"]) == 4')
    s.verify('disjoint_sets(nodes["pod0c0"],nodes["pod0c1"],nodes["pod0c2"])')
    s.verify('len(nodes["pod0c0"]) == 1', 'len(nodes["pod0c1"]) == 1', 'len(nodes["pod0c2"]) == 1')
    s.create("besteffort", CONTCOUNT=4)
    s.verify(
        'cpus["pod1c0"] == cpus["pod1c1"]',
        'cpus["pod1c0"] == cpus["pod1c2"]',
        'cpus["pod1c0"] == cpus["pod1c3"]',
    )
    s.create("burstable", CONTCOUNT=4, CPUREQ="100m", CPULIM="150m")
    s.verify(
        'cpus["pod2c0"] == cpus["pod2c1"]',
        'cpus["pod2c0"] == cpus["pod2c2"]',
        'cpus["pod2c0"] == cpus["pod2c3"]',
        'cpus["pod2c0"] == cpus["pod1c0"]',
    )
    s.verify('disjoint_sets(nodes["pod0c0"],nodes["pod0c1"],nodes["pod0c2"],nodes["pod1c0"])')
    s.delete_all()
    s.create("besteffort", CONTCOUNT=2)
    s.verify('disjoint_sets(cpus["pod3c0"],cpus["pod3c1"])')
    s.create("guaranteed", CPU="4", MEM="100M")
    s.verify('disjoint_sets(cpus["pod4c0"],cpus["pod3c0"],cpus["pod3c1"])')
    s.verify('len(cpus["pod4c0"]) == 4', 'len(nodes["pod4c0"]) == 1')
    s.verify('disjoint_sets(nodes["pod3c0"],nodes["pod3c1"],nodes["pod4c0"])')


#: their test17 scheduling classes (helm-config.yaml's values from their script)
SCHEDULING: dict[str, Any] = {
    "schedulingClasses": [
        {"name": "realtime", "policy": "fifo", "priority": 42},
        {"name": "highprio", "policy": "fifo", "priority": 10},
        {"name": "default", "policy": "other", "nice": 0},
        {"name": "lowprio", "policy": "other", "nice": 10},
        {"name": "idle", "policy": "idle", "nice": 17, "ioClass": "be", "ioPriority": 6},
    ],
    "namespaceSchedulingClasses": {"highprio": "highprio", "lowprio": "lowprio"},
    "podQoSSchedulingClasses": {
        "BestEffort": "lowprio",
        "Burstable": "default",
        "Guaranteed": "highprio",
    },
}


@port(f"{TA}/test17-scheduling-classes")
def test17_scheduling_classes() -> None:
    """n4c16/test17-scheduling-classes: the placements beside the scheduling classes.

    Their ``verify-sched`` reads each process's policy and priority; those are checked
    on the adjustment the daemon sends in
    `tests/unit/resmgr/test_sched_classes.py::test_n4c16_test17_scheduling_classes`.
    """
    s = helm_launch(N4C16, colocatePods=False, **SCHEDULING)
    sc = "scheduling-class.resource-policy.nri.io"

    def ann(pod: str, c0: str, pod_class: str | None = None) -> dict[str, str]:
        out = {f"{sc}/container.{pod}c0": c0}
        if pod_class:
            out[sc] = pod_class
        return out

    s.create(
        "guaranteed", CONTCOUNT=2, CPU="1", MEM="100M", annotations=ann("pod0", "realtime", "idle")
    )
    s.verify('len(cpus["pod0c0"]) == 1')
    s.verify('len(cpus["pod0c1"]) == 1')
    s.create(
        "guaranteed",
        CONTCOUNT=2,
        CPU="750m",
        MEM="100M",
        annotations=ann("pod1", "highprio", "idle"),
    )
    s.verify('len(cpus["pod1c0"]) != 1')
    s.verify('len(cpus["pod1c1"]) != 1')
    s.create(
        "burstable",
        CONTCOUNT=2,
        CPUREQ="250m",
        CPULIM="750m",
        annotations=ann("pod2", "highprio", "lowprio"),
    )
    s.verify('len(cpus["pod2c0"]) != 1')
    s.verify('len(cpus["pod2c1"]) != 1')
    s.create("besteffort", CONTCOUNT=2, annotations=ann("pod3", "lowprio", "idle"))
    s.verify('len(cpus["pod3c0"]) != 1')
    s.verify('len(cpus["pod3c1"]) != 1')
    s.delete_all()
    s.create("burstable", CONTCOUNT=2, namespace="highprio", annotations=ann("pod4", "lowprio"))
    s.verify('len(cpus["pod4c0"]) != 1')
    s.verify('len(cpus["pod4c1"]) != 1')
    s.create("besteffort", CONTCOUNT=2, namespace="lowprio", annotations=ann("pod5", "highprio"))
    s.verify('len(cpus["pod5c0"]) != 1')
    s.verify('len(cpus["pod5c1"]) != 1')
    s.delete_all()
    s.create("besteffort", CONTCOUNT=2, annotations=ann("pod6", "idle"))
    s.verify('len(cpus["pod6c0"]) != 1')
    s.verify('len(cpus["pod6c1"]) != 1')
    s.create(
        "burstable", CONTCOUNT=2, CPUREQ="250m", CPULIM="750m", annotations=ann("pod7", "lowprio")
    )
    s.verify('len(cpus["pod7c0"]) != 1')
    s.verify('len(cpus["pod7c1"]) != 1')
    s.create("guaranteed", CONTCOUNT=2, CPU="250m", annotations=ann("pod8", "realtime"))
    s.verify('len(cpus["pod8c0"]) != 1')
    s.verify('len(cpus["pod8c1"]) != 1')


def _strict_on_node(pod: str, node: int, **more: str) -> dict[str, str]:
    """Their ANN0/ANN1: a strict test topology hint for NUMA node `node`, and `more`."""
    c = f"{pod}c0"
    return {
        f"strict.topologyhints.resource-policy.nri.io/container.{c}": "true",
        f"test.topologyhints.resource-policy.nri.io/container.{c}": (
            f'{{ test: {{ NUMAs: "{node}" }} }} }}'
        ),
        **more,
    }


@port(f"{TA}/test18-strict-alignment")
def test18_strict_alignment() -> None:
    """n4c16/test18-strict-alignment: strict topology hints; unmet ones fail the container.

    Their pods 3, 4 and 6 must reach CreateContainerError: here they are refused, each
    with an error naming it.
    """
    s = helm_launch(N4C16)
    iso = "isolated-cpus.resource-policy.nri.io"
    s.create("guaranteed", CPU="1", MEM="100M", annotations=_strict_on_node("pod0", 2))
    s.verify(
        'cpus["pod0c0"].issubset({"cpu08", "cpu09", "cpu10", "cpu11"})',
        'node_ids(nodes["pod0c0"]) == {2}',
    )
    s.create("guaranteed", CPU="1", MEM="100M", annotations=_strict_on_node("pod1", 3))
    s.verify(
        'cpus["pod1c0"].issubset({"cpu12", "cpu13", "cpu14", "cpu15"})',
        'node_ids(nodes["pod1c0"]) == {3}',
    )
    s.create("guaranteed", CPU="1", MEM="100M", annotations=_strict_on_node("pod2", 2))
    s.verify(
        'cpus["pod2c0"].issubset({"cpu08", "cpu09", "cpu10", "cpu11"})',
        'node_ids(nodes["pod2c0"]) == {2}',
    )
    s.create("guaranteed", CPU="3", MEM="100M", annotations=_strict_on_node("pod3", 2))
    more = {f"require-{iso}/container.pod4c0": "true"}
    s.create("guaranteed", CPU="1", MEM="100M", annotations=_strict_on_node("pod4", 2, **more))
    more = {f"prefer-{iso}/container.pod5c0": "true"}
    s.create("guaranteed", CPU="1", MEM="100M", annotations=_strict_on_node("pod5", 2, **more))
    refusals = ["pod3c0", "pod4c0"]
    errors = s.allowed().errors
    assert all(any(c in e for e in errors) for c in refusals), errors
    s.verify(
        'cpus["pod5c0"].issubset({"cpu08", "cpu09", "cpu10", "cpu11"})',
        'node_ids(nodes["pod5c0"]) == {2}',
        refusing=refusals,
    )
    s.delete("pod5")
    more = {f"prefer-{iso}/pod": "false", f"require-{iso}/container.pod6c0": "true"}
    s.create("guaranteed", CPU="1", MEM="100M", annotations=_strict_on_node("pod6", 2, **more))
    more = {f"prefer-{iso}/container.pod7c0": "true", f"require-{iso}/pod": "true"}
    s.create("guaranteed", CPU="1", MEM="100M", annotations=_strict_on_node("pod7", 2, **more))
    refusals.append("pod6c0")
    errors = s.allowed().errors
    assert any("pod6c0" in e for e in errors) and not any("pod7c0" in e for e in errors), errors
    s.verify(
        'cpus["pod7c0"].issubset({"cpu08", "cpu09", "cpu10", "cpu11"})',
        'node_ids(nodes["pod7c0"]) == {2}',
        refusing=refusals,
    )


def _numa_disabled_root(root: Path) -> None:
    """n4c16 as a kernel without NUMA shows it: no node directory, one memory total."""
    write_sysfs(N4C16, root)
    node_dir = root / "sys" / "devices" / "system" / "node"
    for link in (root / "sys" / "devices" / "system" / "cpu").glob("cpu*/node*"):
        link.unlink()
    for f in sorted(node_dir.rglob("*"), reverse=True):
        f.rmdir() if f.is_dir() else f.unlink()
    node_dir.rmdir()
    (root / "proc").mkdir()
    (root / "proc" / "meminfo").write_text("MemTotal:        8388608 kB\n")


@port(f"{TA}/test30-numa-disabled")
def test30_numa_disabled() -> None:
    """n4c16/test30-numa-disabled: a kernel without NUMA (one node); spread by package."""
    with tempfile.TemporaryDirectory(prefix="parity-numa-disabled-") as tmp:
        _numa_disabled_root(Path(tmp))
        s = Suite(tmp, helm_config())
        assert s.topology.node_ids() == [0] and s.topology.package_ids() == [0, 1]
        s.create("guaranteed", CONTCOUNT=2, CPU="5")
        s.verify(
            'len(cpus["pod0c0"]) == 5',
            'len(cpus["pod0c1"]) == 5',
            'disjoint_sets(cpus["pod0c0"], cpus["pod0c1"])',
            'disjoint_sets(packages["pod0c0"], packages["pod0c1"])',
        )


#: n4c16/test06-fuzz/fuzz.aal: its pods and bounds
FUZZ_PODS = (
    FuzzPod("gu0", "guaranteed", 200, 1500, 1, variables={"CPU": "200m", "MEM": "1500M"}),
    FuzzPod("gu1", "guaranteed", 1000, 500, 2, variables={"CPU": "1000m", "MEM": "500M"}),
    FuzzPod("gu2", "guaranteed", 1200, 4500, 2, variables={"CPU": "1200m", "MEM": "4500M"}),
    FuzzPod("gu3", "guaranteed", 2000, 500, 3, variables={"CPU": "2000m", "MEM": "500M"}),
    FuzzPod("gu4", "guaranteed", 4200, 100, 1, variables={"CPU": "4200m", "MEM": "100M"}),
    FuzzPod(
        "bu0",
        "burstable",
        1200,
        50,
        1,
        variables={"CPUREQ": "900m", "MEMREQ": "49M", "CPULIM": "1200m", "MEMLIM": "50M"},
    ),
    FuzzPod(
        "bu1",
        "burstable",
        1900,
        300,
        2,
        variables={"CPUREQ": "1800m", "MEMREQ": "299M", "CPULIM": "1900m", "MEMLIM": "300M"},
    ),
    FuzzPod("be0", "besteffort", 0, 0, 1),
    FuzzPod("be1", "besteffort", 0, 0, 3),
    FuzzPod("rgu0", "guaranteed", 100, 1000, 2, "kube-system", {"CPU": "100m", "MEM": "1000M"}),
    FuzzPod(
        "rbu0",
        "burstable",
        100,
        100,
        1,
        "kube-system",
        {"CPUREQ": "99m", "MEMREQ": "99M", "CPULIM": "100m", "MEMLIM": "100M"},
    ),
    FuzzPod("rbe0", "besteffort", 0, 0, 2, "kube-system"),
)


@settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(operations(FUZZ_PODS))
@example(ops=[0, 4, 6, 3])  # refused before the shared-pool rule
def test06_fuzz(ops: list[int]) -> None:
    """n4c16/test06-fuzz: every pod their model lets in is placed (none refused)."""
    s = helm_launch(N4C16)
    apply(s, FUZZ_PODS, ops, max_mem=7500, max_cpu=15000, max_reserved_cpu=1000)
    s.verify()
