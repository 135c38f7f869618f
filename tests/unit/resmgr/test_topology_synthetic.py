"""Synthetic specs: numbering, validation, and the write_sysfs -> discover round trip."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.model import CoreType
from nri_resmgr.topology.synthetic import SpecError, build_topology, parse_size, write_sysfs

ISSUE_EXAMPLE = {"packages": 2, "dies": 1, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G"}


def test_issue_example_counts_and_numbering() -> None:
    t = build_topology(ISSUE_EXAMPLE)
    assert len(t.online_cpus()) == 16
    assert len(t.core_ids()) == 8
    assert t.node_ids() == [0, 1, 2, 3]
    assert t.package_ids() == [0, 1]
    # Linux on Intel: thread 0 of every core first; cpu N and N + 8 are siblings
    for n in range(8):
        assert t.siblings(n) == IDSet([n, n + 8])
    assert t.node_cpus(0) == IDSet.parse("0-1,8-9")
    assert t.package_cpus(1) == IDSet.parse("4-7,12-15")
    assert t.package_nodes(1) == IDSet.parse("2-3")
    assert all(n.memory_bytes == 2 << 30 for n in t.nodes.values())
    assert t.distance(0, 1) == 11 and t.distance(0, 2) == 21 and t.distance(3, 3) == 10


def test_dies_l3_and_extra_nodes() -> None:
    t = build_topology(
        {
            "packages": 1, "dies": 2, "nodes": 1, "cores": 4, "threads": 1, "l3_per_die": 2,
            "extra_memory_nodes": [
                {"kind": "pmem", "memory": "8G", "attach": 1},
                {"kind": "hbm", "memory": "1G", "attach": 0},
            ],
        }
    )
    assert t.die_ids() == [0, 1]
    assert t.l3_ids(die=1) == [2, 3]
    assert t.l3_cpus(3) == IDSet.parse("6-7")
    assert t.distance(0, 1) == 12  # same package, other die
    assert t.node_ids(with_cpus=False) == [2, 3]
    assert t.nodes[2].kind == MemoryKind.PMEM and t.closest_cpu_node(2) == 1
    assert t.nodes[3].kind == MemoryKind.HBM and t.closest_cpu_node(3) == 0
    assert t.memory_nodes_near(1, [MemoryKind.DRAM, MemoryKind.PMEM]) == IDSet([1, 2])
    assert t.memory_nodes_near(0, [MemoryKind.HBM]) == IDSet([3])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"cores": 0}, r"cores: .*greater than or equal to 1", id="zero-cores"),
        pytest.param({"threads": 9}, r"threads: .*less than or equal to 8", id="threads"),
        pytest.param({"memory": "2X"}, r"memory: expected a size like 2G.*'2X'", id="size"),
        pytest.param({"l3_per_die": 3, "cores": 4},
                     r"l3_per_die: expected a divisor of the 4 cores of a die, found 3", id="l3"),
        pytest.param({"isolated": "1-"}, r"isolated: id list '1-'", id="isolated-syntax"),
        pytest.param({"isolated": "99", "cores": 2, "threads": 2},
                     r"isolated: expected CPUs within 0-3, found 99", id="isolated-range"),
        pytest.param({"offline": "0"}, r"offline: expected CPUs other than 0", id="offline-0"),
        pytest.param({"color": "red"}, r"color: Extra inputs are not permitted", id="unknown-key"),
        pytest.param({"extra_memory_nodes": [{"kind": "dram", "memory": "1G"}]},
                     r"expected kind pmem, hbm or cxl, found dram", id="cpu-less-dram"),
        pytest.param({"extra_memory_nodes": [{"kind": "pmem", "memory": "1G", "attach": 5}]},
                     r"attach: expected a CPU node 0-0, found 5", id="attach"),
        pytest.param({"extra_memory_nodes": [{"kind": "nvram", "memory": "1G"}]},
                     r"extra_memory_nodes.0.kind", id="kind"),
        pytest.param({"packages": 64, "cores": 1024}, r"expected at most 8192 CPUs", id="too-big"),
        pytest.param({"netdevs": [{"name": "a"}, {"name": "a"}]}, r"netdevs: expected unique",
                     id="netdev-dup"),
        pytest.param({"numbering": "bios"}, r"numbering: Input should be 'linux' or 'qemu'",
                     id="numbering"),
        pytest.param({"present": "1-2"}, r"present: expected a CPU list including cpu0",
                     id="present-no-cpu0"),
        pytest.param({"cores": 2, "threads": 1, "present": "0-2"},
                     r"present: expected CPUs within 0-1, found 0-2", id="present-range"),
        pytest.param({"cores": 4, "threads": 1, "present": "0-1", "offline": "3"},
                     r"offline: expected present CPUs \(0-1\), found 3 not present",
                     id="offline-not-present"),
        pytest.param({"extra_memory_nodes": [{"kind": "hbm", "memory": "1G",
                                              "distances": {1: 20}}]},
                     r"distances: expected other node ids 0-1 \(not its own id 1\), found 1",
                     id="distance-to-itself"),
        pytest.param({"extra_memory_nodes": [
                         {"kind": "hbm", "memory": "1G", "distances": {2: 20}},
                         {"kind": "hbm", "memory": "1G", "distances": {1: 30}}]},
                     r"node 2 to 1 is 20 on the other side; expected the same, found 30",
                     id="distance-asymmetric"),
        pytest.param({"extra_memory_nodes": [{"kind": "hbm", "memory": "1G",
                                              "distances": {0: 5}}]},
                     r"distances.0: Input should be greater than or equal to 11",
                     id="distance-too-small"),
    ],
)
def test_spec_errors_name_field_and_value(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        build_topology(spec)


@pytest.mark.parametrize(
    ("text", "size"),
    [("2G", 2 << 30), ("512Mi", 512 << 20), ("4096k", 4 << 20), ("1TiB", 1 << 40), (1500, 1024)],
)
def test_parse_size(text: object, size: int) -> None:
    assert parse_size(text) == size


#: nri-plugins' e2e machines (test/e2e/policies.test-suite/topology-aware/*/topology.var.json)
N4C16 = {"packages": 2, "nodes": 2, "cores": 2, "threads": 2, "memory": "2G",
         "numbering": "qemu"}
N6_HBM_CXL = {
    "packages": 2, "nodes": 1, "cores": 2, "threads": 2, "memory": "2G", "numbering": "qemu",
    "extra_memory_nodes": [
        {"kind": "hbm", "memory": "1G", "attach": 0, "distances": {0: 15, 1: 30, 3: 35}},
        {"kind": "hbm", "memory": "1G", "attach": 1, "distances": {0: 30, 1: 15, 2: 35}},
        {"kind": "pmem", "memory": "4G", "attach": 0,
         "distances": {0: 60, 1: 70, 2: 62, 3: 72, 5: 75}},
        {"kind": "pmem", "memory": "4G", "attach": 1,
         "distances": {0: 70, 1: 60, 2: 72, 3: 62, 4: 75}},
    ],
}
S8C4K = {"packages": 8, "cores": 512, "threads": 1, "memory": "2G", "numbering": "qemu",
         "present": "0-2,511,1535,4095"}


def test_qemu_numbering_puts_threads_of_a_core_side_by_side() -> None:
    """QEMU guests number CPUs core by core: cpu 2k and 2k+1 are one core's threads."""
    t = build_topology(N4C16)
    assert [str(t.node_cpus(n)) for n in t.node_ids()] == ["0-3", "4-7", "8-11", "12-15"]
    assert [str(t.core_cpus(c)) for c in t.core_ids()] == [
        f"{2 * c}-{2 * c + 1}" for c in range(8)
    ]
    assert str(t.package_cpus(1)) == "8-15"
    linux = build_topology({**N4C16, "numbering": "linux"})
    assert str(linux.core_cpus(0)) == "0,8"


def test_explicit_distances_of_memory_nodes_are_used_both_ways() -> None:
    """n6-hbm-cxl: the node-dist rows of QEMU's spec, the rest computed."""
    t = build_topology(N6_HBM_CXL)
    assert [t.node(n).distances for n in t.node_ids()] == [
        (10, 21, 15, 30, 60, 70),
        (21, 10, 30, 15, 70, 60),
        (15, 30, 10, 35, 62, 72),
        (30, 15, 35, 10, 72, 62),
        (60, 70, 62, 72, 10, 75),
        (70, 60, 72, 62, 75, 10),
    ]
    assert [t.node(n).kind for n in t.node_ids()] == [
        MemoryKind.DRAM, MemoryKind.DRAM, MemoryKind.HBM, MemoryKind.HBM,
        MemoryKind.PMEM, MemoryKind.PMEM,
    ]
    assert [t.closest_cpu_node(n) for n in (2, 3, 4, 5)] == [0, 1, 0, 1]


def test_present_keeps_only_those_cpus() -> None:
    """s8c4k: 8 x 512 possible CPUs, six present; packages without CPUs keep their memory."""
    t = build_topology(S8C4K)
    assert str(IDSet(t.cpus)) == "0-2,511,1535,4095"
    assert [str(t.node_cpus(n)) for n in t.node_ids()] == [
        "0-2,511", "", "1535", "", "", "", "", "4095"
    ]
    assert t.package_ids() == [0, 2, 7]
    assert t.node_memory(t.node_ids()) == 8 * (2 << 30)


@pytest.mark.parametrize("spec", [N4C16, N6_HBM_CXL], ids=["n4c16", "n6-hbm-cxl"])
def test_e2e_machines_round_trip(spec: dict[str, Any], tmp_path: Path) -> None:
    expected = build_topology(spec)
    write_sysfs(spec, tmp_path)
    assert discover(tmp_path) == expected


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    packages = draw(st.integers(1, 2))
    dies = draw(st.integers(1, 2))
    nodes = draw(st.integers(1, 2))
    cores = draw(st.integers(1, 3))
    threads = draw(st.integers(1, 2))
    per_die = nodes * cores
    l3 = draw(st.sampled_from([d for d in range(1, per_die + 1) if per_die % d == 0]))
    total = packages * dies * nodes * cores * threads
    cpu_ids = st.integers(0, total - 1)
    isolated = draw(st.frozensets(cpu_ids, max_size=3))
    offline = draw(st.frozensets(st.integers(1, total - 1), max_size=2)) if total > 1 else set()
    efficient = draw(st.frozensets(cpu_ids, max_size=3))
    cpu_nodes = packages * dies * nodes
    extras = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "kind": st.sampled_from(["pmem", "hbm", "cxl"]),
                    "memory": st.sampled_from(["1G", "16G", "300M"]),
                    "attach": st.integers(0, cpu_nodes - 1),
                }
            ),
            max_size=2,
        )
    )
    netdevs = draw(
        st.lists(st.one_of(st.none(), st.integers(0, cpu_nodes - 1)), max_size=2)
    )
    numbering = draw(st.sampled_from(["linux", "qemu"]))
    return {
        "numbering": numbering,
        "packages": packages, "dies": dies, "nodes": nodes, "cores": cores,
        "threads": threads, "l3_per_die": l3,
        "memory": draw(st.sampled_from(["1G", "2G", "1536M"])),
        "isolated": str(IDSet(isolated)), "offline": str(IDSet(offline)),
        "efficient_cpus": str(IDSet(efficient)),
        "hugepages": draw(st.sampled_from([{}, {"2M": 8}, {"2M": 4, "1G": 1}])),
        "extra_memory_nodes": extras,
        "netdevs": [{"name": f"eth{i}", "node": n} for i, n in enumerate(netdevs)],
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_write_sysfs_round_trips(spec: dict[str, Any]) -> None:
    expected = build_topology(spec)
    with tempfile.TemporaryDirectory() as tmp:
        written = write_sysfs(spec, tmp)
        found = discover(tmp)
    assert written == expected
    assert found == expected
    # the derived views agree as well, not only the records
    assert found.online_cpus() == expected.online_cpus()
    assert [found.core_cpus(c) for c in found.core_ids()] == [
        expected.core_cpus(c) for c in expected.core_ids()
    ]
    for n in expected.node_ids(with_cpus=False):
        assert found.closest_cpu_node(n) == expected.closest_cpu_node(n)


def test_round_trip_of_a_discovered_topology(tmp_path: Path) -> None:
    """write_sysfs also takes a Topology: writing what was discovered reproduces it."""
    first = tmp_path / "a"
    write_sysfs({"packages": 2, "nodes": 2, "cores": 2, "efficient_cpus": "0-1"}, first)
    t = discover(first)
    write_sysfs(t, tmp_path / "b")
    again = discover(tmp_path / "b")
    assert again == t
    assert again.core_type_cpus(CoreType.EFFICIENT) == IDSet([0, 1])


def test_written_files_look_like_the_kernel(tmp_path: Path) -> None:
    write_sysfs(dict(ISSUE_EXAMPLE, isolated="2-3", offline="5"), tmp_path)
    cpu = tmp_path / "sys/devices/system/cpu"
    node = tmp_path / "sys/devices/system/node"
    assert (cpu / "online").read_text() == "0-4,6-15\n"
    assert (cpu / "isolated").read_text() == "2-3\n"
    assert (cpu / "cpu5/online").read_text() == "0\n"
    assert not (cpu / "cpu0/online").exists()  # cpu0 has no online switch
    assert (cpu / "cpu9/topology/thread_siblings_list").read_text() == "1,9\n"
    assert (cpu / "cpu4/topology/core_id").read_text() == "4\n"
    assert (cpu / "cpu3/node1").resolve() == (node / "node1").resolve()
    assert (node / "node2/distance").read_text() == "21 21 10 11\n"
    assert (node / "node0/meminfo").read_text().startswith("Node 0 MemTotal:       2097152 kB\n")
