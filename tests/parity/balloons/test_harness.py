"""The harness itself: its answers about a run are right (checked with topology-aware)."""

from __future__ import annotations

from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from tests.parity.balloons._sim import N4C16, Script, disjoint, simulate, with_l2_per_node


def test_script_names_pods_and_containers_as_their_template_does() -> None:
    s = Script()
    s.create(contcount=2, cpureq="1", cpulim="1", memreq="100M", memlim="100M")
    s.create(namespace="three", cpureq="100m", cpulim="")
    assert s.delete("pod0") == 2
    pod0 = s.steps[0]["create"]
    assert [c["name"] for c in pod0["containers"]] == ["pod0c0", "pod0c1"]
    assert pod0["containers"][0]["limits"] == {"cpu": "1", "memory": "100M"}
    assert s.steps[1]["create"]["namespace"] == "three"
    assert s.steps[1]["create"]["containers"][0]["requests"] == {
        "cpu": "100m",
        "memory": "100M",
    }
    assert s.steps[1]["create"]["containers"][0]["limits"] == {}


def test_create_defaults_are_their_frameworks_and_empty_means_unset() -> None:
    # run.sh: yaml_in_defaults="... CPUREQ=1 CPULIM=2 MEMREQ=100M MEMLIM=200M ..."
    s = Script()
    s.create()
    s.create(memreq="", memlim="")
    s.create(cpureq="", cpulim="3")  # their template: CPUREQ gates limits too
    s.create(cpulim="", memlim="1G")
    ctrs = [step["create"]["containers"][0] for step in s.steps]
    assert ctrs[0]["requests"] == {"cpu": "1", "memory": "100M"}
    assert ctrs[0]["limits"] == {"cpu": "2", "memory": "200M"}
    assert ctrs[1]["requests"] == {"cpu": "1"}
    assert ctrs[1]["limits"] == {"cpu": "2"}
    assert ctrs[2]["requests"] == ctrs[2]["limits"] == {}
    assert ctrs[3]["requests"] == {"cpu": "1", "memory": "100M"}
    assert ctrs[3]["limits"] == {}


def test_placement_reads_cpus_nodes_cores_and_packages() -> None:
    s = Script()
    s.create(cpureq="2", cpulim="2", memreq="100M", memlim="100M")
    s.create(cpureq="100m", cpulim="", memreq="", memlim="")
    run = simulate(s, {"reservedResources": {"cpu": "1"}}, policy="topology-aware")
    p = run.at(1)
    pinned = p.cpus("pod0c0")
    assert len(pinned) == 2
    assert len(p.cores("pod0c0")) == 1  # a whole core (its two threads)
    assert len(p.nodes("pod0c0")) == 1
    assert len(p.packages("pod0c0")) == 1
    assert disjoint(pinned, p.cpus("pod1c0"))
    assert not disjoint(pinned, pinned)
    assert p.live("pod1c") == ["pod1c0"]
    assert p.mems("pod0c0") <= IDSet(range(4))


def test_a_topology_object_runs_through_sysfs_discovery() -> None:
    # L2 shared by the two cores of a NUMA node, as their test13/test15 cache overrides
    topo = with_l2_per_node(load_topology(N4C16))
    s = Script()
    s.create(cpureq="100m", cpulim="", memreq="", memlim="")
    run = simulate(s, {"reservedResources": {"cpu": "1"}}, topology=topo, policy="topology-aware")
    assert run.topology == topo
    assert {c.l2_id for c in run.topology.cpus.values()} == {0, 1, 2, 3}
    assert run.at(0).cpus("pod0c0")


def test_no_cpuset_or_memory_set_means_everything_as_in_their_verify() -> None:
    s = Script()
    s.create()
    run = simulate(s, {}, policy="none")
    p = run.at(0)
    assert p.cpus("pod0c0") == IDSet(range(16))
    assert p.mems("pod0c0") == IDSet(range(4))
