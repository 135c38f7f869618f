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

from nri_resmgr.topology.load import load_topology
from tests.parity.balloons._sim import (
    BALLOON,
    N4C16,
    Script,
    config,
    res,
    simulate,
    with_l2_per_node,
)
from tests.parity.ports import port

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


@port("balloons/n4c16/test13-cacheclusters")
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

    # one container per free L2 group, idle CPUs of the group shared (their first
    # expression twice, as written)
    run.verify(
        pod0,
        'len(cpus["pod0c0"]) == 4',
        'len(cpus["pod0c0"]) == 4',
        'len(cpus["pod0c1"]) == 4',
        'disjoint_sets(nodes["pod0c0"], nodes["pod0c1"], nodes["pod0c2"])',
    )
    # the last group is shared with the reserved balloon
    run.verify(
        pod1,
        'len(cpus["pod1c0"]) == 3',
        'disjoint_sets(cpus["pod1c0"], cpus["pod0c0"], cpus["pod0c1"], cpus["pod0c2"])',
    )
    # two per l2pack instance, all in the reserved balloon's L2 group
    run.verify(
        pod2,
        'len(cpus["pod2c0"]) == 2',
        'len(cpus["pod2c1"]) == 2',
        'len(cpus["pod2c2"]) == 2',
        'len(cpus["pod2c3"]) == 2',
        'len(set.intersection(cpus["pod2c0"], cpus["pod2c1"], cpus["pod2c2"], cpus["pod2c3"]))'
        " == 1",
        'len(set.union(cpus["pod2c0"], cpus["pod2c1"], cpus["pod2c2"], cpus["pod2c3"])) == 3',
        'nodes["pod2c0"] == nodes["pod2c1"] == nodes["pod2c2"] == nodes["pod2c3"]',
    )
    # the reserved balloon inflates: no idle CPU left to share
    run.verify(
        pod3,
        'nodes["pod3c0"] == nodes["pod2c0"] == nodes["pod2c1"] == nodes["pod2c2"]'
        ' == nodes["pod2c3"]',
        'len(cpus["pod3c0"]) == 2',
        'len(cpus["pod2c0"]) == 1',
        'len(cpus["pod2c1"]) == 1',
        'len(cpus["pod2c2"]) == 1',
        'len(cpus["pod2c3"]) == 1',
        'disjoint_sets(cpus["pod3c0"], cpus["pod2c0"])',
        'disjoint_sets(cpus["pod3c0"], cpus["pod2c1"])',
        'disjoint_sets(cpus["pod3c0"], cpus["pod2c2"])',
        'disjoint_sets(cpus["pod3c0"], cpus["pod2c3"])',
        'len(set.union(cpus["pod3c0"], cpus["pod2c0"], cpus["pod2c1"], cpus["pod2c2"],'
        ' cpus["pod2c3"])) == 4',
    )


@port("balloons/n4c16/test13-cacheclusters")
def test_cacheclusters_l2_per_core() -> None:
    s = Script(pods=4)  # their counters carry on after the first configuration
    burst = {BALLOON: "l2burst"}
    pod4 = s.create(contcount=4, annotations=burst, **G500)
    pod5 = s.create(contcount=3, annotations=burst, **G500)
    run = simulate(s, CONFIG)

    # one per free L2 group (a core), one per NUMA node
    run.verify(
        pod4,
        'len(cpus["pod4c0"]) == 2',
        'len(cpus["pod4c1"]) == 2',
        'len(cpus["pod4c2"]) == 2',
        'len(cpus["pod4c3"]) == 2',
        'disjoint_sets(cpus["pod4c0"], cpus["pod4c1"], cpus["pod4c2"], cpus["pod4c3"])',
        'disjoint_sets(nodes["pod4c0"], nodes["pod4c1"], nodes["pod4c2"], nodes["pod4c3"])',
    )
    run.verify(
        pod5,
        'len(cpus["pod5c0"]) == 2',
        'len(cpus["pod5c1"]) == 2',
        'len(cpus["pod5c2"]) == 2',
        'disjoint_sets(cpus["pod5c0"], cpus["pod5c1"], cpus["pod5c2"], cpus["pod4c0"],'
        ' cpus["pod4c1"], cpus["pod4c2"], cpus["pod4c3"])',
    )
