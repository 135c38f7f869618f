"""Discovery on the real machine snapshots, and on damaged sysfs trees.

The expected values in MACHINES were read from the snapshot files by hand (``cat`` of
``cpu/online``, ``cpu/isolated``, ``node*/cpulist``, ``node*/distance``,
``node*/meminfo``, ``cpu*/topology/*``, ``cpu*/cache/index3/shared_cpu_list``,
``cpu_core/cpus``, ``cpu_atom/cpus``) and from the archives' README, not from this code.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nri_resmgr.model import MemoryKind
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.discover import DiscoveryError, discover
from nri_resmgr.topology.load import extract_archive, load_topology
from nri_resmgr.topology.model import CoreType, Topology
from nri_resmgr.topology.synthetic import write_sysfs
from tests.support.requirements import require_topologies


@dataclass(frozen=True, slots=True)
class Machine:
    archive: str
    packages: int
    nodes: int
    cpu_nodes: int
    cores: int
    threads: int
    isolated: str
    pmem_nodes: str
    distances: tuple[tuple[int, ...], ...]
    package_nodes: tuple[str, ...]
    l3_count: int
    efficient: str
    node0_mem_kib: int
    node0_cpus: str
    siblings_of_1: str
    attach: tuple[tuple[int, int], ...] = ()  # CPU-less node -> closest CPU node


MACHINES = [
    Machine(
        archive="desktop-1s-1n-20t",
        packages=1,
        nodes=1,
        cpu_nodes=1,
        cores=10,
        threads=20,
        isolated="",
        pmem_nodes="",
        distances=((10,),),
        package_nodes=("0",),
        l3_count=1,
        efficient="",
        node0_mem_kib=65621548,
        node0_cpus="0-19",
        siblings_of_1="1,11",
    ),
    Machine(
        archive="workstation-1s-1n-16t",
        # 4 P-cores with 2 threads (cpus 0-7) + 8 single-thread E-cores (cpus 8-15)
        packages=1,
        nodes=1,
        cpu_nodes=1,
        cores=12,
        threads=16,
        isolated="",
        pmem_nodes="",
        distances=((10,),),
        package_nodes=("0",),
        l3_count=1,
        efficient="8-15",
        node0_mem_kib=40645580,
        node0_cpus="0-15",
        siblings_of_1="0-1",
    ),
    Machine(
        archive="server-2s-4n-80t-snc",
        packages=2,
        nodes=4,
        cpu_nodes=4,
        cores=40,
        threads=80,
        isolated="",
        pmem_nodes="",
        distances=((10, 11, 21, 21), (11, 10, 21, 21), (21, 21, 10, 11), (21, 21, 11, 10)),
        package_nodes=("0-1", "2-3"),
        l3_count=2,
        efficient="16-19,36-39,56-59,76-79",
        node0_mem_kib=48005604,
        node0_cpus="0-2,5-6,10-12,15-16,40-42,45-46,50-52,55-56",
        siblings_of_1="1,41",
    ),
    Machine(
        archive="server-2s-4n-2pmem-112t-isolated",
        packages=2,
        nodes=6,
        cpu_nodes=4,
        cores=56,
        threads=112,
        isolated="4-7,60-63",
        pmem_nodes="4-5",
        distances=(
            (10, 21, 11, 21, 17, 28),
            (21, 10, 21, 11, 28, 28),
            (11, 21, 10, 21, 28, 17),
            (21, 11, 21, 10, 28, 28),
            (17, 28, 28, 28, 10, 28),
            (28, 28, 17, 28, 28, 10),
        ),
        package_nodes=("0,2", "1,3"),
        l3_count=2,
        efficient="",
        node0_mem_kib=32372996,
        node0_cpus="0-108:4",
        siblings_of_1="1,57",
        attach=((4, 0), (5, 2)),
    ),
]


def _cpus(text: str) -> IDSet:
    """Kernel list, plus ``a-b:step`` for the strided lists of the PMEM server."""
    if ":" in text:
        span, step = text.split(":")
        lo, hi = span.split("-")
        return IDSet(range(int(lo), int(hi) + 1, int(step)))
    return IDSet.parse(text)


@pytest.fixture(scope="session")
def snapshot_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Path]]:
    """Unpack each snapshot once per session; returns name -> sysfs root."""
    roots: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in roots:
            archive = require_topologies() / f"{name}.tar.xz"
            roots[name] = extract_archive(archive, tmp_path_factory.mktemp(name))
        return roots[name]

    yield get


@pytest.fixture(params=MACHINES, ids=lambda m: m.archive)
def machine(
    request: pytest.FixtureRequest, snapshot_root: Callable[[str], Path]
) -> tuple[Machine, Topology]:
    m: Machine = request.param
    return m, discover(snapshot_root(m.archive))


def test_counts(machine: tuple[Machine, Topology]) -> None:
    m, t = machine
    assert len(t.package_ids()) == m.packages
    assert len(t.nodes) == m.nodes
    assert len(t.node_ids(with_cpus=True)) == m.cpu_nodes
    assert len(t.core_ids()) == m.cores
    assert len(t.online_cpus()) == m.threads
    assert t.online_cpus() == IDSet(range(m.threads))
    assert t.isolated_cpus() == IDSet.parse(m.isolated)
    assert len(t.l3_ids()) == m.l3_count
    assert t.offline_cpus() == IDSet()


def test_memory_and_distances(machine: tuple[Machine, Topology]) -> None:
    m, t = machine
    assert t.nodes_of_kind(MemoryKind.PMEM) == IDSet.parse(m.pmem_nodes)
    assert t.nodes_of_kind(MemoryKind.DRAM) == IDSet(t.node_ids(with_cpus=True))
    assert t.nodes_of_kind(MemoryKind.HBM) == IDSet()
    for a, row in enumerate(m.distances):
        assert t.nodes[a].distances == row
        for b, d in enumerate(row):
            assert t.distance(a, b) == d
    assert t.nodes[0].memory_bytes == m.node0_mem_kib * 1024
    for node, cpu_node in m.attach:
        assert t.closest_cpu_node(node) == cpu_node
        assert node in t.memory_nodes_near(cpu_node, [MemoryKind.PMEM])
        assert t.memory_nodes_near(cpu_node, [MemoryKind.DRAM]) == IDSet([cpu_node])


def test_cpu_placement(machine: tuple[Machine, Topology]) -> None:
    m, t = machine
    assert t.node_cpus(0) == _cpus(m.node0_cpus)
    assert [str(t.package_nodes(p)) for p in t.package_ids()] == list(m.package_nodes)
    assert t.siblings(1) == IDSet.parse(m.siblings_of_1)
    assert t.core_type_cpus(CoreType.EFFICIENT) == IDSet.parse(m.efficient)
    # every online CPU is in exactly one core, node, L3 and package
    for query, ids in (
        (t.core_cpus, t.core_ids()),
        (t.node_cpus, t.node_ids()),
        (t.l3_cpus, t.l3_ids()),
        (t.package_cpus, t.package_ids()),
    ):
        sets = [query(i) for i in ids]
        assert sum(len(s) for s in sets) == len(t.online_cpus())
        merged: set[int] = set()
        for s in sets:
            merged |= s.ids()
        assert merged == t.online_cpus().ids()


def test_pmem_server_details(snapshot_root: Callable[[str], Path]) -> None:
    t = discover(snapshot_root("server-2s-4n-2pmem-112t-isolated"))
    # the isolated CPUs are 4 whole cores: 4-7 and their siblings 60-63
    assert t.cores_of(t.isolated_cpus()) == {
        t.cpus[c].core_id: IDSet([c, c + 56]) for c in range(4, 8)
    }
    assert t.node_ids(with_cpus=False) == [4, 5]
    assert t.nodes[4].memory_bytes == 130023424 * 1024
    assert t.nodes[4].cpus == IDSet()
    assert t.threads_per_core() == 2
    # package 0 holds the even CPUs and one L3 shared by nodes 0 and 2
    assert t.package_cpus(0) == IDSet(range(0, 112, 2))
    assert [str(t.l3_nodes(l3)) for l3 in t.l3_ids()] == ["0,2", "1,3"]


def test_snc_and_hybrid_details(snapshot_root: Callable[[str], Path]) -> None:
    t = discover(snapshot_root("server-2s-4n-80t-snc"))
    assert t.nodes[0].hugepages == {2048: 2560, 1048576: 0}
    assert t.l3_cpus(t.cpus[0].l3_id) == IDSet.parse("0-19,40-59")
    assert t.die_ids() == [0, 1]  # both packages say die_id 0; made machine-unique
    w = discover(snapshot_root("workstation-1s-1n-16t"))
    assert w.core_type_cpus(CoreType.PERFORMANCE) == IDSet.parse("0-7")
    assert len(w.l2_ids()) == 6  # one per P-core, one per 4-E-core cluster
    assert w.l2_cpus(w.cpus[9].l2_id) == IDSet.parse("8-11")
    assert w.siblings(9) == IDSet([9])


def test_archive_loads_like_directory(snapshot_root: Callable[[str], Path]) -> None:
    archive = require_topologies() / "desktop-1s-1n-20t.tar.xz"
    assert load_topology(archive) == discover(snapshot_root("desktop-1s-1n-20t"))
    assert load_topology(str(snapshot_root("desktop-1s-1n-20t"))).online_cpus() == IDSet(range(20))


# ---- damaged trees -------------------------------------------------------------------


@pytest.fixture
def small_root(tmp_path: Path) -> Path:
    write_sysfs({"packages": 2, "nodes": 1, "cores": 2, "threads": 2, "memory": "1G"}, tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("relpath", "content", "expected"),
    [
        pytest.param(
            "devices/system/cpu/cpu1/topology/core_id",
            "one\n",
            r"cpu1/topology/core_id: expected an integer, found 'one'",
            id="core-id",
        ),
        pytest.param(
            "devices/system/cpu/isolated",
            "2-\n",
            r"cpu/isolated: expected a kernel id list",
            id="isolated-list",
        ),
        pytest.param(
            "devices/system/node/node0/distance",
            "10 x\n",
            r"node0/distance: expected distances",
            id="distance-text",
        ),
        pytest.param(
            "devices/system/node/node1/distance",
            "21 10 30\n",
            r"node1/distance: expected 2 distances .* found 3",
            id="distance-count",
        ),
        pytest.param(
            "devices/system/node/node0/meminfo",
            "garbage\n",
            r"node0/meminfo: expected a line 'Node N MemTotal",
            id="meminfo",
        ),
        pytest.param(
            "devices/system/cpu/cpu2/cache/index3/shared_cpu_list",
            "x\n",
            r"index3/shared_cpu_list: expected a kernel id list",
            id="cache-list",
        ),
    ],
)
def test_malformed_file_is_named(
    small_root: Path, relpath: str, content: str, expected: str
) -> None:
    (small_root / "sys" / relpath).write_text(content)
    with pytest.raises(DiscoveryError, match=expected):
        discover(small_root)


def test_missing_files_degrade(small_root: Path) -> None:
    sys_dir = small_root / "sys" / "devices" / "system"
    for cpu in range(8):
        (sys_dir / "cpu" / f"cpu{cpu}" / "topology" / "die_id").unlink()
        shutil.rmtree(sys_dir / "cpu" / f"cpu{cpu}" / "cache")
    (sys_dir / "cpu" / "isolated").unlink()
    (sys_dir / "node" / "node0" / "distance").unlink()
    (sys_dir / "node" / "node1" / "distance").unlink()
    t = discover(small_root)
    assert len(t.online_cpus()) == 8
    assert t.die_ids() == [0, 1]
    # without cache information an L3 is a die and an L2 is a core
    assert [t.l3_cpus(i) for i in t.l3_ids()] == [IDSet.parse("0-1,4-5"), IDSet.parse("2-3,6-7")]
    assert len(t.l2_ids()) == len(t.core_ids()) == 4
    assert t.distance(0, 1) == 20 and t.distance(1, 1) == 10


def test_siblings_name_the_core_without_core_id(small_root: Path) -> None:
    cpu_dir = small_root / "sys" / "devices" / "system" / "cpu"
    for cpu in range(8):
        (cpu_dir / f"cpu{cpu}" / "topology" / "core_id").unlink()
    for cpu in (1, 5):  # and cpu 1's core has only the older thread_siblings_list
        (cpu_dir / f"cpu{cpu}" / "topology" / "core_cpus_list").unlink()
    t = discover(small_root)
    assert sorted(map(str, (t.core_cpus(c) for c in t.core_ids()))) == ["0,4", "1,5", "2,6", "3,7"]
    for cpu in range(8):
        (cpu_dir / f"cpu{cpu}" / "topology" / "thread_siblings_list").unlink()
        (cpu_dir / f"cpu{cpu}" / "topology" / "core_cpus_list").unlink(missing_ok=True)
    assert len(discover(small_root).core_ids()) == 8  # nothing left: every CPU a core


def test_no_numa_directory_is_one_node(small_root: Path) -> None:
    shutil.rmtree(small_root / "sys" / "devices" / "system" / "node")
    t = discover(small_root)
    assert t.node_ids() == [0]
    assert t.node_cpus(0) == IDSet(range(8))
    assert t.node(0).memory_bytes == 0  # no proc/meminfo under this root: nothing known


def test_no_numa_node_has_the_machine_memory(small_root: Path) -> None:
    """Without NUMA the one node holds /proc/meminfo's MemTotal (not 0: nothing would fit)."""
    shutil.rmtree(small_root / "sys" / "devices" / "system" / "node")
    (small_root / "proc").mkdir(exist_ok=True)
    (small_root / "proc" / "meminfo").write_text(
        "MemTotal:        4194304 kB\nMemFree:         1000 kB\n"
    )
    assert discover(small_root).node(0).memory_bytes == 4 << 30
    (small_root / "proc" / "meminfo").write_text("Total: lots\n")
    with pytest.raises(DiscoveryError, match=r"proc/meminfo: expected a line 'MemTotal: <kB> kB'"):
        discover(small_root)


def test_offline_cpu_from_online_file(small_root: Path) -> None:
    (small_root / "sys" / "devices" / "system" / "cpu" / "cpu3" / "online").write_text("0\n")
    t = discover(small_root)
    assert 3 not in t.online_cpus()
    assert t.offline_cpus() == IDSet([3])
    assert t.siblings(7) == IDSet([7])  # cpu 3's sibling now runs alone


def test_an_attribute_that_cannot_be_read_counts_as_missing(small_root: Path) -> None:
    cpu3 = small_root / "sys" / "devices" / "system" / "cpu" / "cpu3"
    (cpu3 / "online").unlink(missing_ok=True)
    (cpu3 / "online").mkdir()  # read() fails with EISDIR: the online list decides
    (small_root / "sys" / "devices" / "system" / "cpu" / "online").write_text("0-2,4-7\n")
    assert discover(small_root).offline_cpus() == IDSet([3])


def test_a_bad_cache_list_names_its_file_every_time(small_root: Path) -> None:
    shared = small_root / "sys/devices/system/cpu/cpu5/cache/index3/shared_cpu_list"
    good = shared.read_text()
    discover(small_root)  # the good list is parsed (and remembered) first
    shared.write_text("0-x\n")
    for _ in range(2):  # a failed parse is not remembered as a value
        with pytest.raises(DiscoveryError, match=r"cpu5/cache/index3/shared_cpu_list: expected"):
            discover(small_root)
    shared.write_text(good)
    assert discover(small_root).online_cpus() == IDSet(range(8))


def test_a_file_longer_than_one_read_is_read_whole(small_root: Path) -> None:
    """Files are read a chunk at a time until a short read: a meminfo whose MemTotal line
    comes after more than a chunk of other lines is still found."""
    meminfo = small_root / "sys" / "devices" / "system" / "node" / "node0" / "meminfo"
    padding = "".join(f"Node 0 Other{i}:  {i} kB\n" for i in range(1000))
    assert len(padding) > 2 * 8192
    meminfo.write_text(padding + "Node 0 MemTotal:       2048 kB\n")
    assert discover(small_root).node(0).memory_bytes == 2048 * 1024


def test_an_l1_cache_is_read_no_further_than_its_level(small_root: Path) -> None:
    """No domain is made of an L1, so past its ``level`` nothing of it is read: its
    ``type`` and ``shared_cpu_list`` could hold anything (here, what would be refused in
    an L2 or L3) and the machine is the same."""
    before = discover(small_root)
    cpu_dir = small_root / "sys" / "devices" / "system" / "cpu"
    for cpu in range(8):
        for index in ("index0", "index1"):  # L1 data and instruction (write_sysfs)
            assert (cpu_dir / f"cpu{cpu}" / "cache" / index / "level").read_text() == "1\n"
            (cpu_dir / f"cpu{cpu}" / "cache" / index / "shared_cpu_list").write_text("x\n")
    after = discover(small_root)
    assert [after.l2_cpus(i) for i in after.l2_ids()] == [
        before.l2_cpus(i) for i in before.l2_ids()
    ]
    assert [after.l3_cpus(i) for i in after.l3_ids()] == [
        before.l3_cpus(i) for i in before.l3_ids()
    ]
    # an L2's list is still read and checked
    (cpu_dir / "cpu0" / "cache" / "index2" / "shared_cpu_list").write_text("x\n")
    with pytest.raises(DiscoveryError, match=r"cpu0/cache/index2/shared_cpu_list: expected"):
        discover(small_root)


def test_not_a_sysfs_root(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match=r"expected a sysfs tree with devices/system/cpu"):
        discover(tmp_path)


def test_netdevs_from_snapshot_root_never_use_netlink(
    small_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nri_resmgr.topology.discover as disc

    def boom() -> None:
        raise AssertionError("netlink must not be used for a snapshot root")

    monkeypatch.setattr(disc, "_netlink_names", boom)
    write_sysfs(
        {"packages": 1, "nodes": 2, "cores": 1, "netdevs": [{"name": "eth0", "node": 1}]},
        small_root / "other",
    )
    t = discover(small_root / "other")
    assert [(d.name, d.node_id) for d in t.netdevs] == [("eth0", 1)]


def test_netlink_is_asked_for_the_host_root_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import nri_resmgr.topology.discover as disc

    calls: list[str] = []

    def names() -> list[str]:
        calls.append("netlink")
        return []

    monkeypatch.setattr(disc, "_netlink_names", names)
    discover("/")
    assert calls == ["netlink"]
    discover("/", netlink=False)
    assert calls == ["netlink"]


def test_daemon_lists_network_devices_from_sysfs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon never pays pyroute2's import inside the runtime's registration window."""
    import nri_resmgr.topology.discover as disc
    from nri_resmgr.runtime.process import DaemonOptions, load_daemon_topology

    def boom() -> None:
        raise AssertionError("the daemon must not ask netlink")

    monkeypatch.setattr(disc, "_netlink_names", boom)
    topo = load_daemon_topology(DaemonOptions(sysfs_root="/"))
    assert topo.source == "sysfs:/"


def test_netdev_pci_address_is_the_pci_function_not_the_virtio_device(
    small_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A virtio NIC's ``device`` is ``virtio0``, a child of its PCI function."""
    root = small_root / "vm"
    write_sysfs({"packages": 1, "nodes": 1, "cores": 2, "netdevs": [{"name": "eno1"}]}, root)
    sys_dir = root / "sys"
    func = sys_dir / "devices" / "pci0000:00" / "0000:00:03.0"
    (func / "virtio0" / "net" / "eth0").mkdir(parents=True)
    (func / "numa_node").write_text("0\n")
    (func / "virtio0" / "net" / "eth0" / "device").symlink_to("../../../virtio0")
    (sys_dir / "class" / "net" / "eth0").symlink_to(
        "../../devices/pci0000:00/0000:00:03.0/virtio0/net/eth0"
    )
    platform = sys_dir / "devices" / "platform" / "soc" / "eth9"
    (platform / "net" / "end0").mkdir(parents=True)
    (platform / "net" / "end0" / "device").symlink_to("../../../eth9")
    (sys_dir / "class" / "net" / "end0").symlink_to("../../devices/platform/soc/eth9/net/end0")

    topo = discover(root)
    assert [(d.name, d.pci_address, d.node_id) for d in topo.netdevs] == [
        ("end0", "", None),
        ("eno1", "0000:10:00.0", None),
        ("eth0", "0000:00:03.0", 0),
    ]
    from nri_resmgr.topology.render import render_tree

    tree = render_tree(topo)
    assert "netdev eth0 (0000:00:03.0)" in tree
    assert "virtio0" not in tree
