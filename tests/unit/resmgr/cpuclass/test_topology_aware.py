"""CPU classes in the topology-aware policy: the reserved, shared and exclusive CPUs'
classes, the ``cpu-class`` annotation, and their errors (their n4c16/test19-cpuclass,
its CPU frequency half: the SST/PCT CLOS association is not implemented here)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nri_resmgr.model import AnnotationError, ConfigError, ContainerID, QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, topo

CLASS = "cpu-class.resource-policy.nri.io"
MACHINE = topo(packages=2, nodes=2, cores=4, threads=2, memory="2G")  # 32 CPUs
ALL = IDSet.parse("1-31")
CONFIG: dict[str, Any] = {
    "reservedResources": {"cpu": "cpuset:0"},
    "cpuClasses": [
        {"name": "shared", "minFreq": "min", "maxFreq": "base"},
        {"name": "reserved", "minFreq": "min", "maxFreq": "turbo"},
        {"name": "exclusive", "minFreq": "turbo", "maxFreq": "turbo"},
        {"name": "class1", "minFreq": "min", "maxFreq": "base"},
    ],
    "sharedPoolCPUClass": "shared",
    "reservedPoolCPUClass": "reserved",
    "defaultExclusiveCPUClass": "exclusive",
}


def policy(**changes: Any) -> TopologyAwarePolicy:
    return TopologyAwarePolicy(topology=MACHINE, config={**CONFIG, **changes})


def test_pools_and_exclusive_cpus_get_their_classes() -> None:
    p = policy()
    use = p.cpu_class_use(p.initial_state())
    assert use.cpus == {"reserved": IDSet([0]), "shared": ALL}
    state = p.initial_state()
    d = p.allocate(state, ctr("c0", pod="pod0", milli=2000))
    d = p.allocate(
        d.state, ctr("c1", pod="pod0", milli=2000, ann={f"{CLASS}/container.c1": "class1"})
    )
    use = p.cpu_class_use(d.state)
    c0, c1 = (d.state.grants[ContainerID(f"pod0-{n}")].exclusive for n in ("c0", "c1"))
    assert (use.cpus["exclusive"], use.cpus["class1"]) == (c0, c1)
    assert use.cpus["shared"] == ALL - c0 - c1
    # released: the CPUs are shared again
    d = p.release(p.release(d.state, ContainerID("pod0-c0")).state, ContainerID("pod0-c1"))
    assert p.cpu_class_use(d.state).cpus == {"reserved": IDSet([0]), "shared": ALL}


@pytest.mark.parametrize(
    ("qos", "milli", "message"),
    [
        (QoSClass.BURSTABLE, 1000, "CPU class 'class1' invalid for non-Guaranteed QoS class"),
        (QoSClass.BEST_EFFORT, 0, "CPU class 'class1' invalid for non-Guaranteed QoS class"),
        (QoSClass.GUARANTEED, 250, "CPU class 'class1' invalid without exclusive CPUs"),
    ],
    ids=["burstable", "besteffort", "guaranteed-fraction"],
)
def test_the_annotation_needs_exclusive_cpus(qos: QoSClass, milli: int, message: str) -> None:
    p = policy()
    limit = milli if qos is QoSClass.GUARANTEED else None
    c = ctr("c0", pod="pod2", qos=qos, milli=milli, limit=limit, ann={CLASS: "class1"})
    with pytest.raises(AnnotationError, match=re.escape(message)):
        p.allocate(p.initial_state(), c)


def test_an_unknown_class_in_the_annotation_is_an_error() -> None:
    p = policy()
    c = ctr("c0", milli=1000, ann={CLASS: "clas1"})
    with pytest.raises(AnnotationError, match="names CPU class 'clas1'; expected one of"):
        p.allocate(p.initial_state(), c)


@pytest.mark.parametrize(
    ("key", "what"),
    [
        ("reservedPoolCPUClass", "reserved"),
        ("sharedPoolCPUClass", "shared"),
        ("defaultExclusiveCPUClass", "default exclusive"),
    ],
)
def test_pool_classes_must_be_defined(key: str, what: str) -> None:
    # nri-plugins says: unknown reserved CPU class "nonexistent"; here the key is named
    # (one rule for every policy, `kit.constraints.check_cpu_class_names`)
    with pytest.raises(
        ConfigError, match=f"{key}: CPU class 'nonexistent' is not in cpuClasses; expected one of"
    ):
        policy(**{key: "nonexistent"})


def test_without_classes_the_annotation_is_an_error_and_nothing_is_classed() -> None:
    p = TopologyAwarePolicy(topology=MACHINE, config={"reservedResources": {"cpu": "cpuset:0"}})
    assert p.cpu_class_use(p.initial_state()).cpus == {}
    with pytest.raises(AnnotationError, match="no CPU classes are configured"):
        p.allocate(p.initial_state(), ctr("c0", milli=1000, ann={CLASS: "class1"}))
