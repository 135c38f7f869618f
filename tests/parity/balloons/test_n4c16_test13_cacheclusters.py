"""n4c16/test13-cacheclusters: ``shareIdleCPUsInSame: l2cache``, packing instances into one
L2 group or spreading them over groups.

Their first configuration overrides the VM's caches so that L2 is shared by the two cores
of a NUMA node (`with_l2_per_node`); their second gives each core its own L2, which is
what the synthetic n4c16 has anyway.

Their VM is a kubeadm cluster: its control plane runs in the reserved balloon and
requests 850m (kube-apiserver 250m, kube-controller-manager 200m, kube-scheduler 100m,
etcd 100m, two coredns 100m each), which is why their pod3 (500m more) inflates the
reserved balloon from one CPU to two.  `control_plane` puts that load there first.
"""

from __future__ import annotations

from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from tests.parity.balloons._sim import (
    BALLOON,
    N4C16,
    Script,
    config,
    disjoint,
    res,
    simulate,
    with_l2_per_node,
)

CONFIG = config("""
allocatorTopologyBalancing: true
reservedResources:
  cpu: 750m
pinCPU: true
pinMemory: true
balloonTypes:
- name: l2burst
  minCPUs: 1
  maxCPUs: 4
  shareIdleCPUsInSame: l2cache
  preferSpreadingPods: true
  preferNewBalloons: true
- name: l2pack
  allocatorTopologyBalancing: false
  shareIdleCPUsInSame: l2cache
  maxCPUs: 1
""")
G500 = res("500m", "100M")
#: their cluster's own kube-system containers and CPU requests (kubeadm defaults)
CONTROL_PLANE = {
    "kube-apiserver": "250m",
    "kube-controller-manager": "200m",
    "kube-scheduler": "100m",
    "etcd": "100m",
    "coredns-0": "100m",
    "coredns-1": "100m",
}


def control_plane(s: Script) -> None:
    """Their cluster's kube-system pod(s), before the test's own pods (not counted)."""
    containers = [
        {"name": name, "requests": {"cpu": cpu}, "limits": {}}
        for name, cpu in CONTROL_PLANE.items()
    ]
    pod = {"pod": "control-plane", "namespace": "kube-system", "containers": containers}
    s.steps.append({"create": pod})


def intersection(*sets: IDSet) -> IDSet:
    out = sets[0]
    for s in sets[1:]:
        out = out & s
    return out


def test_cacheclusters_l2_per_numa_node() -> None:
    s = Script()
    control_plane(s)
    burst = {BALLOON: "l2burst"}
    pod0 = s.create(contcount=3, annotations=burst, **res("1500m", "100M"))
    pod1 = s.create(annotations=burst, **res("2", "100M"))
    s.delete("pod0", "pod1")
    pod2 = s.create(contcount=4, annotations={BALLOON: "l2pack"}, **G500)
    pod3 = s.create(annotations={BALLOON: "reserved"}, **G500)
    run = simulate(s, CONFIG, topology=with_l2_per_node(load_topology(N4C16)))

    p = run.at(pod0)  # one container per free L2 group, idle CPUs of the group shared
    assert [len(p.cpus(f"pod0c{i}")) for i in range(3)] == [4, 4, 4]
    assert disjoint(*(p.nodes(f"pod0c{i}") for i in range(3)))
    p = run.at(pod1)  # the last group is shared with the reserved balloon
    assert len(p.cpus("pod1c0")) == 3
    assert disjoint(p.cpus("pod1c0"), *(p.cpus(f"pod0c{i}") for i in range(3)))
    p = run.at(pod2)  # two per l2pack instance, all in the reserved balloon's L2 group
    two = [p.cpus(f"pod2c{i}") for i in range(4)]
    assert [len(c) for c in two] == [2, 2, 2, 2]
    assert len(intersection(*two)) == 1
    assert len(two[0] | two[1] | two[2] | two[3]) == 3
    assert len({p.nodes(f"pod2c{i}") for i in range(4)}) == 1
    p = run.at(pod3)  # the reserved balloon inflates: no idle CPU left to share
    assert p.nodes("pod3c0") == p.nodes("pod2c0")
    assert len(p.cpus("pod3c0")) == 2
    assert [len(p.cpus(f"pod2c{i}")) for i in range(4)] == [1, 1, 1, 1]
    assert all(disjoint(p.cpus("pod3c0"), p.cpus(f"pod2c{i}")) for i in range(4))
    every = p.cpus("pod3c0") | p.cpus("pod2c0") | p.cpus("pod2c1") | p.cpus("pod2c2")
    assert len(every | p.cpus("pod2c3")) == 4


def test_cacheclusters_l2_per_core() -> None:
    s = Script(pods=4)  # their counters carry on after the first configuration
    burst = {BALLOON: "l2burst"}
    pod4 = s.create(contcount=4, annotations=burst, **G500)
    pod5 = s.create(contcount=3, annotations=burst, **G500)
    run = simulate(s, CONFIG)

    p = run.at(pod4)  # one per free L2 group (a core), one per NUMA node
    four = [f"pod4c{i}" for i in range(4)]
    assert [len(p.cpus(c)) for c in four] == [2, 2, 2, 2]
    assert disjoint(*(p.cpus(c) for c in four))
    assert disjoint(*(p.nodes(c) for c in four))
    p = run.at(pod5)
    three = [f"pod5c{i}" for i in range(3)]
    assert [len(p.cpus(c)) for c in three] == [2, 2, 2]
    assert disjoint(*(p.cpus(c) for c in three + four))
