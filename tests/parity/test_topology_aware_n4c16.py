"""nri-plugins' topology-aware e2e suite on n4c16, ported to the simulator.

Source: containers/nri-plugins test/e2e/policies.test-suite/topology-aware/n4c16/ at
`tests.parity.upstream.TAG`.  Each test function replays its script's steps in order
(create, delete, a relaunch with another configuration) and, where the script calls
``verify``, calls `Suite.verify` with the same expressions as written there, every one of
them (`tests.parity.ports`; `tests.parity.test_upstream` counts them).  A test split in
two replays the earlier steps without their checks.  The machine: 2 packages x 2 NUMA
nodes x 2 cores x 2 threads, QEMU numbering (node0 = cpus 0-3, node1 = 4-7, node2 =
8-11, node3 = 12-15); their default config reserves 750m.
"""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.model import ConfigError
from tests.parity.machines import N4C16, helm_config
from tests.parity.ports import port
from tests.parity.suite import Suite, helm_launch

TA = "topology-aware/n4c16"


def suite(pod_count: int = 0, **config: Any) -> Suite:
    return helm_launch(N4C16, pod_count, **config)


@port(f"{TA}/test00-basic-placement")
def test00_basic_placement() -> None:
    """n4c16/test00-basic-placement: containers spread over nodes; colocation options."""
    s = suite()
    s.create("guaranteed", CONTCOUNT=4, CPU="1")
    s.verify(
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod0c1"]) == 1',
        'len(cpus["pod0c2"]) == 1',
        'len(cpus["pod0c3"]) == 1',
        'disjoint_sets(cpus["pod0c0"], cpus["pod0c1"], cpus["pod0c2"], cpus["pod0c3"])',
        'disjoint_sets(nodes["pod0c0"], nodes["pod0c1"], nodes["pod0c2"], nodes["pod0c3"])',
    )
    s.delete_all()
    ann = {"hide-hyperthreads.resource-policy.nri.io/container.pod1c2": "true"}
    s.create("guaranteed", CONTCOUNT=4, CPU="3", annotations=ann)
    s.verify(
        'len(cpus["pod1c0"]) == 3',
        'len(cpus["pod1c1"]) == 3',
        'len(cpus["pod1c2"]) == 2',
        'len(cores["pod1c2"]) == 2',
        'len(cpus["pod1c3"]) == 3',
        'disjoint_sets(cpus["pod1c0"], cpus["pod1c1"], cpus["pod1c2"], cpus["pod1c3"])',
        'disjoint_sets(nodes["pod1c0"], nodes["pod1c1"], nodes["pod1c2"], nodes["pod1c3"])',
    )
    s.delete_all()
    s.create("burstable", CONTCOUNT=4, CPUREQ="2", CPULIM="2002m")
    s.verify(
        'disjoint_sets(cpus["pod2c0"], cpus["pod2c1"], cpus["pod2c2"], cpus["pod2c3"])',
        'disjoint_sets(nodes["pod2c0"], nodes["pod2c1"], nodes["pod2c2"], nodes["pod2c3"])',
    )
    s.delete_all()
    s.create("guaranteed", ICONTCOUNT=5, CONTCOUNT=2, CPU="5", MEM="100M")
    s.verify(
        'disjoint_sets(cpus["pod3c0"], cpus["pod3c1"])',
        'disjoint_sets(nodes["pod3c0"], nodes["pod3c1"])',
        'disjoint_sets(packages["pod3c0"], packages["pod3c1"])',
    )

    s = suite(4, colocatePods=True)
    s.create("guaranteed", CONTCOUNT=4, CPU="100m")
    s.verify(
        'cpus["pod4c1"] == cpus["pod4c0"]',
        'cpus["pod4c2"] == cpus["pod4c0"]',
        'cpus["pod4c3"] == cpus["pod4c0"]',
    )

    s = suite(5, colocateNamespaces=True)
    s.create("guaranteed", CONTCOUNT=1, CPU="100m", namespace="test-ns")
    s.create("guaranteed", CONTCOUNT=1, CPU="100m", namespace="test-ns")
    s.create("guaranteed", CONTCOUNT=2, CPU="100m", namespace="test-ns")
    s.verify(
        'cpus["pod6c0"] == cpus["pod5c0"]',
        'cpus["pod7c0"] == cpus["pod5c0"]',
        'cpus["pod7c1"] == cpus["pod5c0"]',
    )


@port(f"{TA}/test01-always-fits")
def test01_always_fits() -> None:
    """n4c16/test01-always-fits: a pod fits in a core, node, die, root; burstables too."""
    s = suite(colocatePods=True)
    s.create("guaranteed", CPU="1")
    s.verify('node_ids(nodes["pod0c0"]) == {1}', 'cpu_ids(cpus["pod0c0"]) == {4}')
    s.create("guaranteed", CPU="2")
    s.verify(
        'cpu_ids(cpus["pod0c0"]) == {4}',
        'node_ids(nodes["pod1c0"]) == {2}',
        'cpu_ids(cpus["pod1c0"]) == {8, 9}',
    )
    s.create("guaranteed", CPU="3")
    s.verify(
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod1c0"]) == 2',
        'len(cores["pod1c0"]) == 1',
        'len(cpus["pod2c0"]) == 3',
        'len(cores["pod2c0"]) == 2',
        'len(nodes["pod2c0"]) == 1',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"], cpus["pod2c0"])',
    )
    s.create("guaranteed", CPU="4")
    s.verify(
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod1c0"]) == 2',
        'len(cores["pod1c0"]) == 1',
        'len(cpus["pod2c0"]) == 3',
        'len(cores["pod2c0"]) == 2',
        'len(nodes["pod2c0"]) == 1',
        'len(cpus["pod3c0"]) == 4',
        'len(cores["pod3c0"]) == 2',
        'len(nodes["pod3c0"]) == 2',
        'disjoint_sets(cpus["pod0c0"], cpus["pod1c0"], cpus["pod2c0"], cpus["pod3c0"])',
    )
    s.delete_all()
    s.create("guaranteed", CPU="5")
    s.verify(
        'len(cpus["pod4c0"]) == 5',
        'len(cores["pod4c0"]) == 3',
        'len(nodes["pod4c0"]) == 2',
        'len(dies["pod4c0"]) == 1',
    )
    s.create("guaranteed", CPU="7")
    s.verify(
        'len(cpus["pod4c0"]) == 5',
        'len(cores["pod4c0"]) == 3',
        'len(nodes["pod4c0"]) == 2',
        'len(dies["pod4c0"]) == 1',
        'len(cpus["pod5c0"]) == 7',
        'len(cores["pod5c0"]) == 4',
        'len(dies["pod5c0"]) == 1',
        'disjoint_sets(cpus["pod4c0"], cpus["pod5c0"])',
    )
    s.delete_all()
    s.create("guaranteed", CPU="9")
    s.verify('len(cpus["pod6c0"]) == 9', 'len(packages["pod6c0"]) == 2')
    s.delete_all()
    s.reset_counters()
    # pod0-pod2: burstable containers get at least the CPUs they request
    s.create("burstable", CPUREQ="3", CPULIM="4")
    s.verify('len(cpus["pod0c0"]) >= 2')
    s.create("burstable", CPUREQ="4", CPULIM="5")
    s.verify('len(cpus["pod0c0"]) >= 2', 'len(cpus["pod1c0"]) >= 4')
    s.create("burstable", CPUREQ="5", CPULIM="6")
    s.verify('len(cpus["pod0c0"]) >= 2', 'len(cpus["pod1c0"]) >= 4', 'len(cpus["pod2c0"]) >= 5')
    s.delete("pod0", "pod1")
    s.create("burstable", CPUREQ="8", CPULIM="9")
    s.verify('len(cpus["pod2c0"]) >= 5', 'len(cpus["pod3c0"]) >= 8')
    s.delete("pod3")
    s.create("burstable", CPUREQ="5", CPULIM="6")
    s.create("burstable", CPUREQ="4", CPULIM="5")
    s.verify('len(cpus["pod2c0"]) >= 5', 'len(cpus["pod4c0"]) >= 5', 'len(cpus["pod5c0"]) >= 4')


@port(f"{TA}/test02-shrink-and-grow-shared")
def test02_shrink_and_grow_shared() -> None:
    """n4c16/test02-shrink-and-grow-shared: best-effort squeezed, never on exclusive CPUs."""
    s = suite(colocatePods=True)
    s.create("guaranteed", CPU="5", CONTCOUNT=2)
    s.verify(
        'len(cpus["pod0c0"]) == 5',
        'len(cpus["pod0c1"]) == 5',
        'len(nodes["pod0c0"]) == len(nodes["pod0c1"]) == 2',
        'len(dies["pod0c0"]) == len(dies["pod0c1"]) == 1',
        'disjoint_sets(cpus["pod0c0"], cpus["pod0c1"])',
    )
    s.create("besteffort", CONTCOUNT=2)
    s.verify(
        'len(cpus["pod0c0"]) == 5',
        'len(cpus["pod0c1"]) == 5',
        'disjoint_sets(set.union(cpus["pod0c0"], cpus["pod0c1"]))',
        'len(cpus["pod1c0"]) > 0',
        'len(cpus["pod1c1"]) > 0',
        'disjoint_sets(\n         set.union(cpus["pod0c0"], cpus["pod0c1"]),\n'
        '         set.union(cpus["pod1c0"], cpus["pod1c1"]))',
    )
    s.delete("pod0")
    s.create("guaranteed", CPU="3", CONTCOUNT=4)
    s.verify(
        'len(cpus["pod2c0"]) == len(cpus["pod2c1"]) == len(cpus["pod2c2"])'
        ' == len(cpus["pod2c3"]) == 3',
        'disjoint_sets(cpus["pod2c0"], cpus["pod2c1"], cpus["pod2c2"], cpus["pod2c3"])',
    )
    s.create("guaranteed", CPU="1")
    s.verify(
        'disjoint_sets(\n         set.union(cpus["pod1c0"], cpus["pod1c1"]),\n'
        '         set.union(cpus["pod3c0"],\n'
        '                   cpus["pod2c0"], cpus["pod2c1"], cpus["pod2c2"], cpus["pod2c3"]))',
    )


@port(f"{TA}/test03-simple-affinity")
def test03_simple_affinity() -> None:
    """n4c16/test03-simple-affinity: no annotations, affinity, anti-affinity."""
    s = suite()
    s.create("guaranteed", CONTCOUNT=4, CPU="1")
    s.verify(
        'nodes["pod0c0"] == {"node1"}',
        'nodes["pod0c1"] == {"node2"}',
        'nodes["pod0c2"] == {"node3"}',
        'nodes["pod0c3"] == {"node0"}',
    )
    s.delete_all()
    ann = {"resource-policy.nri.io/affinity": "pod1c0: [ pod1c1 ]\npod1c2: [ pod1c3 ]\n"}
    s.create("guaranteed", CONTCOUNT=4, CPU="1", annotations=ann)
    s.verify(
        'nodes["pod1c0"] == nodes["pod1c1"] == {"node1"}',
        'nodes["pod1c2"] == nodes["pod1c3"] == {"node2"}',
    )
    s.delete_all()
    anti = {
        "resource-policy.nri.io/anti-affinity": (
            "pod2c4: [ pod2c0, pod2c1, pod2c2 ]\npod2c5: [ pod2c0, pod2c2, pod2c3 ]\n"
        )
    }
    s.create("guaranteed", CONTCOUNT=6, CPU="1", annotations=anti)
    s.verify(
        'disjoint_sets(nodes["pod2c4"], nodes["pod2c0"], nodes["pod2c1"], nodes["pod2c2"])',
        'disjoint_sets(nodes["pod2c5"], nodes["pod2c0"], nodes["pod2c2"], nodes["pod2c3"])',
    )


@port(f"{TA}/test04-available-resources")
def test04_available_resources() -> None:
    """n4c16/test04-available-resources: a cpuset, then exclude-cpuset with unlimitedBurstable."""
    s = suite(reservedResources={"cpu": "cpuset:11"}, availableResources={"cpu": "cpuset:4-7,8-11"})
    s.create("guaranteed", CPU="3")
    s.verify("cpus['pod0c0'] == {'cpu04', 'cpu05', 'cpu06'}", "mems['pod0c0'] == {'node1'}")
    s.create("guaranteed", CONTCOUNT=2, CPU="980m")
    s.verify(
        "cpus['pod1c0'] == {'cpu08', 'cpu09', 'cpu10'}",
        "cpus['pod1c1'] == {'cpu08', 'cpu09', 'cpu10'}",
        "mems['pod1c0'] == {'node2'}",
        "mems['pod1c1'] == {'node2'}",
    )
    s = suite(
        2,
        reservedResources={"cpu": "cpuset:11-15"},
        availableResources={"cpu": "exclude-cpuset:0-1"},
        unlimitedBurstable="system",
    )
    s.create("burstable", CPUREQ="250m", CPULIM="0")
    s.verify(
        "cpus['pod2c0'] == {'cpu02', 'cpu03', 'cpu04', 'cpu05', 'cpu06', 'cpu07', 'cpu08',"
        " 'cpu09', 'cpu10'}",
        "mems['pod2c0'] == {'node0', 'node1', 'node2', 'node3'}",
    )


def test05_reserved_resources_launch_errors() -> None:
    """n4c16/test05-reserved-resources: reserved CPUs outside available ones fail to start."""
    for reserved in ("cpuset:3,7,11,15", "11"):
        s = suite(
            reservedResources={"cpu": reserved}, availableResources={"cpu": "cpuset:4-7,8-13"}
        )
        s.create("besteffort")
        with pytest.raises(ConfigError):
            s.run()


@port(f"{TA}/test05-reserved-resources")
def test05_reserved_resources() -> None:
    """n4c16/test05-reserved-resources: kube-system and reserved CPUs; pod5 beyond them."""
    avail = {"cpu": "cpuset:4-7,8-13"}
    s = suite(reservedResources={"cpu": "cpuset:10-11"}, availableResources=avail)
    s.create("besteffort", namespace="kube-system", CONTCOUNT=3)
    s.verify("cpus['pod0c0'] == cpus['pod0c1'] == cpus['pod0c2'] == {'cpu10', 'cpu11'}")
    s = suite(1, reservedResources={"cpu": "cpuset:7,11"}, availableResources=avail)
    s.create("besteffort", namespace="kube-system", CONTCOUNT=4)
    s.verify(
        "cpus['pod1c0'] == cpus['pod1c1'] == cpus['pod1c2'] == cpus['pod1c3']",
        "cpus['pod1c0'] == {'cpu07', 'cpu11'}",
    )
    s.create("guaranteed", namespace="kube-system", CPU="200m", CONTCOUNT=4)
    s.verify(
        "cpus['pod2c0'] == cpus['pod2c1'] == cpus['pod2c2'] == cpus['pod2c3']",
        "cpus['pod2c0'] == {'cpu07', 'cpu11'}",
    )
    for pod in ("pod3", "pod4"):
        s.create("guaranteed", namespace="kube-system", CPU="100m")
        s.verify("cpus['${pod}c0'] == {'cpu07', 'cpu11'}", shell={"pod": pod})
        s.delete(pod)
    s.create("guaranteed", namespace="kube-system", CPU="2")
    s.verify(
        "cpus['pod5c0'] == {'cpu04', 'cpu05', 'cpu06', 'cpu08', 'cpu09', 'cpu10', 'cpu12', 'cpu13'}"
    )
    s = suite(reservedResources={"cpu": "2250m"}, availableResources=avail)
    s.create("besteffort", namespace="kube-system", CPU="2")
    s.verify("cpus['pod0c0'] == {'cpu04', 'cpu05', 'cpu06'}")


@port(f"{TA}/test07-mixed-allocations")
def test07_mixed_allocations() -> None:
    """n4c16/test07-mixed-allocations: shared, mixed (exclusive + shared) and opt-outs."""
    s = suite()
    s.create("guaranteed", CONTCOUNT=2, CPU="500m")
    s.verify(
        "len(mems['pod0c0']) == 1",
        "len(mems['pod0c1']) == 1",
        "disjoint_sets(mems['pod0c0'], mems['pod0c1'])",
        "len(cpus['pod0c0']) == 4",
        "len(cpus['pod0c1']) == 4",
        "disjoint_sets(cpus['pod0c0'], cpus['pod0c1'])",
    )
    s.create("guaranteed", CONTCOUNT=2, CPU="1500m")
    s.verify(
        "[len(mems[c]) for c in mems] == [1] * len(mems)",
        "disjoint_sets(mems['pod1c0'], mems['pod1c1'])",
        "len(cpus['pod0c0']) == 3 or len(cpus['pod0c1']) == 3",
        "len(cpus['pod0c0']) == 4 or len(cpus['pod0c1']) == 4",
        "len(cpus['pod1c0']) == 4",
        "len(cpus['pod1c1']) == 4",
        "len(cpus['pod1c1'] - cpus['pod0c0'] - cpus['pod0c1']) == 1",
    )
    s.create("guaranteed", CONTCOUNT=2, CPU="2400m")
    s.verify(
        "[len(mems[c]) for c in mems] == [1] * len(mems)",
        "len(cpus['pod1c1'] - set.union(*[cpus[c] for c in cpus if c != 'pod1c1'])) == 1",
        "len(cpus['pod2c0']) == 3",
        "len(cpus['pod2c0'] - set.union(*[cpus[c] for c in cpus if c != 'pod2c0'])) == 3",
        "len(cpus['pod2c1']) == 4",
        "len(cpus['pod2c1'] - set.union(*[cpus[c] for c in cpus if c != 'pod2c1'])) == 0",
        "mems['pod2c1'] == mems['pod0c0'] or mems['pod2c1'] == mems['pod0c1']",
    )
    shared = "prefer-shared-cpus.resource-policy.nri.io/pod"
    isolated = "prefer-isolated-cpus.resource-policy.nri.io/pod"
    s.create("guaranteed", CPU="2400m", annotations={shared: "false", isolated: "true"})
    s.verify(
        "[len(mems[c]) for c in mems] == [1] * len(mems)",
        "mems['pod3c0'] == mems['pod1c0']",
        "len(cpus['pod1c0'] - set.union(*[cpus[c] for c in cpus if c != 'pod1c0'])) == 1",
        "len(cpus['pod3c0'] - set.union(*[cpus[c] for c in cpus if c != 'pod3c0'])) == 2",
    )
    s.delete("pod3")
    s.create("guaranteed", CPU="2400m", annotations={shared: "false", isolated: "false"})
    s.verify(
        "[len(mems[c]) for c in mems] == [1] * len(mems)",
        "mems['pod4c0'] == mems['pod1c0']",
        "len(cpus['pod1c0'] - set.union(*[cpus[c] for c in cpus if c != 'pod1c0'])) == 1",
        "len(cpus['pod4c0'] - set.union(*[cpus[c] for c in cpus if c != 'pod4c0'])) == 2",
    )
    s.delete("pod1")
    s.verify("len(cpus['pod0c0']) == 4", "len(cpus['pod0c1']) == 4")
    s.create("guaranteed", CONTCOUNT=2, CPU="1500m", annotations={shared: "true"})
    s.verify(
        "[len(mems[c]) for c in mems] == [1] * len(mems)",
        "mems['pod5c0'] == mems['pod0c0'] or mems['pod5c0'] == mems['pod0c1']",
        "len(cpus['pod5c0']) == 4",
        "len(cpus['pod0c0']) == 4",
        "len(cpus['pod0c1']) == 4",
        "mems['pod5c1'] == mems['pod4c0']",
        "len(cpus['pod5c1']) == 2",
        "len(cpus['pod5c0'] - set.union(*[cpus[c] for c in cpus if c != 'pod5c0'])) == 0",
        "len(cpus['pod5c1'] - set.union(*[cpus[c] for c in cpus if c != 'pod5c1'])) == 0",
    )


@port(f"{TA}/test08-cpuprio-allocation")
def test08_cpuprio_allocation() -> None:
    """n4c16/test08-cpuprio-allocation: E-cores from the spec (their OVERRIDE_SYS_*_CPUS).

    pod0: cpus 4-5 are E-cores, low priority takes them.  pod1: P-cores 0-1,4-5, high
    priority gets them (their pod annotation ``low`` is overwritten by the next ANN0 line
    of their script, so only the two container annotations take effect there too).
    """
    key = "prefer-cpu-priority.resource-policy.nri.io/container"
    s = Suite({**N4C16, "efficient_cpus": "4-5"}, helm_config())
    s.create(
        "guaranteed", CONTCOUNT=3, annotations={f"{key}.pod0c0": "low", f"{key}.pod0c2": "low"}
    )
    s.verify(
        'cpus["pod0c0"] == {"cpu04"}',
        'cpus["pod0c1"] not in [ {"cpu04"}, {"cpu05"} ]',
        'cpus["pod0c2"] == {"cpu05"}',
    )
    s = Suite({**N4C16, "efficient_cpus": "2-3,6-15"}, helm_config())
    s.pod_count = 1
    s.create(
        "guaranteed", CONTCOUNT=3, annotations={f"{key}.pod1c0": "high", f"{key}.pod1c2": "high"}
    )
    s.verify(
        'cpus["pod1c0"] in     [ {"cpu01"}, {"cpu04"}, {"cpu05"} ]',
        'cpus["pod1c1"] not in [ {"cpu01"}, {"cpu04"}, {"cpu05"} ]',
        'cpus["pod1c2"] in     [ {"cpu01"}, {"cpu04"}, {"cpu05"} ]',
    )


@port(f"{TA}/test09-container-exit")
def test09_container_exit() -> None:
    """n4c16/test09-container-exit: a container's CPUs across a crash and an exit.

    Their crash kills pod0c0's process and the kubelet starts a new container in its
    place; the simulator has no container-level restart, so the pod is deleted and
    created again under the same name.  Their exit completes the container: here its pod
    is deleted.  Their last check reads container ids in their cache
    (``allocations``); we keep none (`tests.parity.test_upstream.LEFT_OUT`).
    """
    s = suite()
    s.create("guaranteed", CPU="1000m", MEM="64M")
    s.verify('len(cpus["pod0c0"]) == 1')
    s.delete("pod0")
    s.create("guaranteed", name="pod0", CPU="1000m", MEM="64M")
    s.verify('len(cpus["pod0c0"]) == 1')
    s.delete("pod0")
    s.verify('"pod0c0" not in cpus')


@port(f"{TA}/test10-additional-reserved-namespaces")
def test10_additional_reserved_namespaces() -> None:
    """n4c16/test10-additional-reserved-namespaces: reservedPoolNamespaces with globs."""
    s = suite(
        reservedPoolNamespaces=["reserved-pool", "reserved-*", "foobar"],
        availableResources={"cpu": "cpuset:8-11"},
        reservedResources={"cpu": "cpuset:10-11"},
    )
    s.create("besteffort", namespace="kube-system")
    s.create("besteffort")
    s.verify('cpus["pod0c0"] == {"cpu10", "cpu11"}')
    s.verify('cpus["pod1c0"] == {"cpu08", "cpu09"}')
    s.delete_all()
    key = "prefer-reserved-cpus.resource-policy.nri.io/pod"
    s.create("besteffort", namespace="foobar")
    s.create("besteffort", namespace="foobar", annotations={key: "false"})
    s.create("besteffort", namespace="foobar", annotations={key: "true"})
    s.verify('cpus["pod2c0"] == {"cpu10", "cpu11"}')
    s.verify('cpus["pod3c0"] == {"cpu08", "cpu09"}')
    s.verify('cpus["pod4c0"] == {"cpu10", "cpu11"}')


@port(f"{TA}/test11-reserved-cpu-annotations")
def test11_reserved_cpu_annotations() -> None:
    """n4c16/test11-reserved-cpu-annotations: prefer-reserved-cpus, cpu/memory.preserve.

    Their ``reserved-annotated`` template is a Guaranteed pod with the annotations given.
    """
    s = suite(availableResources={"cpu": "cpuset:8-11"}, reservedResources={"cpu": "cpuset:10-11"})
    key = "prefer-reserved-cpus.resource-policy.nri.io"
    s.create("guaranteed", annotations={f"{key}/pod": "true"})
    s.verify('cpus["pod0c0"] == {"cpu10", "cpu11"}')
    s.create("guaranteed", annotations={f"{key}/container.special": "false"})
    s.verify('cpus["pod1c0"] == {"cpu08"}')
    s.delete("pod0")
    s.create(
        "guaranteed",
        annotations={
            f"{key}/pod": "true",
            "hide-hyperthreads.resource-policy.nri.io/pod": "true",
        },
    )
    s.verify('cpus["pod2c0"] == {"cpu10"}')
    pre = "resource-policy.nri.io"
    s.create(
        "guaranteed",
        CONTCOUNT=4,
        CPU="100m",
        MEM="100M",
        annotations={
            f"cpu.preserve.{pre}": "true",
            f"memory.preserve.{pre}/container.pod3c1": "true",
            f"memory.preserve.{pre}/container.pod3c2": "true",
            f"cpu.preserve.{pre}/container.pod3c2": "false",
            f"cpu.preserve.{pre}/container.pod3c3": "false",
            f"memory.preserve.{pre}/container.pod3c3": "false",
        },
    )
    s.verify(
        'len(cpus["pod3c0"]) == 16',
        'len(mems["pod3c0"]) == 4',
        'len(cpus["pod3c1"]) == 16',
        'len(mems["pod3c1"]) == 4',
        'len(cpus["pod3c2"]) == 1',
        'len(mems["pod3c2"]) == 4',
        'len(cpus["pod3c3"]) == 1',
        'len(mems["pod3c3"]) == 1',
    )
