"""Device and mount locality from a synthetic sysfs (`topology.devices`, `write_sysfs`
with PCI devices): the topology hints a container's devices and mounts give.

Machine: n4c16 (2 packages x 2 nodes x 2 cores x 2 threads): node2 = 4-5,12-13,
node3 = 6-7,14-15.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import DeviceRef, HintSource, MountRef, TopologyHint
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.devices import device_hints, topology_hints
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.synthetic import SpecError, build_topology, write_sysfs
from tests.support.builders import SPEC_2S2N

DEVICES: list[dict[str, Any]] = [
    {"pci": "0000:3b:00.0", "name": "nvme0n1", "node": 2, "block": "259:0"},
    {"pci": "0000:d8:00.0", "name": "nvme1n1", "node": 0, "block": "259:1"},
    {"pci": "0000:af:00.0", "name": "card0", "node": 3, "char": "226:0"},
    {"pci": "0000:00:1f.0", "name": "legacy", "char": "10:200"},  # numa_node -1
    {"pci": "0000:00:1e.0", "name": "md0", "block": "9:0", "slaves": ["nvme0n1", "nvme1n1"]},
    {"pci": "0000:5e:00.0", "name": "accel0", "node": 1, "local_cpus": "2-3", "char": "511:3"},
]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_sysfs(SPEC_2S2N, tmp_path, devices=DEVICES)
    return tmp_path


def hint_of(hints: tuple[TopologyHint, ...] | list[TopologyHint]) -> list[tuple[str, str, str]]:
    return [(h.provider, str(h.cpus), str(h.nodes)) for h in hints]


def test_devices_resolve_to_their_pci_function(root: Path) -> None:
    got = topology_hints(
        root,
        devices=[
            DeviceRef("/dev/nvme0n1", "b", 259, 0),
            DeviceRef("/dev/dri/card0", "c", 226, 0),
            DeviceRef("/dev/accel0", "c", 511, 3),
        ],
    )
    assert hint_of(got) == [
        ("/sys/devices/pci0000:3b/0000:3b:00.0", "4-5,12-13", "2"),
        ("/sys/devices/pci0000:af/0000:af:00.0", "6-7,14-15", "3"),
        ("/sys/devices/pci0000:5e/0000:5e:00.0", "2-3", "1"),
    ]
    assert {h.source for h in got} == {HintSource.DEVICES}


def test_no_hint_for_unknown_non_numa_or_virtual_devices(root: Path) -> None:
    assert topology_hints(root, devices=[DeviceRef("/dev/legacy", "c", 10, 200)]) == ()
    assert topology_hints(root, devices=[DeviceRef("/dev/x", "c", 99, 9)]) == ()
    assert topology_hints(root, devices=[DeviceRef("/dev/null", "c", 0, 3)]) == ()
    assert topology_hints(root, devices=[DeviceRef("/dev/x", "p", 226, 0)]) == ()


def test_a_raid_device_gives_the_hints_of_its_members(root: Path) -> None:
    got = device_hints(root, kind="b", major=9, minor=0, source=HintSource.DEVICES)
    assert sorted(str(h.nodes) for h in got) == ["0", "2"]


def test_the_hints_survive_discovery_of_the_same_root(root: Path) -> None:
    # PCI devices do not disturb CPU/memory discovery; they are recorded besides
    found = discover(root)
    assert replace(found, pci_devices=()) == build_topology(SPEC_2S2N)
    assert "0000:3b:00.0" in {f.address for f in found.pci_devices}


@dataclass(frozen=True)
class FakeStat:
    st_mode: int
    st_dev: int = 0
    st_rdev: int = 0


def test_mounts_resolve_by_sysfs_path_device_node_or_file_system(root: Path) -> None:
    stats = {
        "/mnt/fast": FakeStat(stat.S_IFDIR | 0o755, st_dev=os.makedev(259, 0)),
        "/dev/dri/card0": FakeStat(stat.S_IFCHR | 0o660, st_rdev=os.makedev(226, 0)),
        "/var/lib/kubelet/pods/x/etc-hosts": FakeStat(stat.S_IFREG, st_dev=os.makedev(259, 1)),
    }

    def fake_stat(path: str) -> FakeStat:
        if path not in stats:
            raise FileNotFoundError(path)
        return stats[path]

    got = topology_hints(
        root,
        mounts=[
            MountRef("/mnt/fast", "/data"),
            MountRef("/dev/dri/card0", "/dev/dri/card0"),
            MountRef("/sys/devices/pci0000:5e/0000:5e:00.0/misc/accel0", "/sys/accel"),
            # ignored: read-only, /etc destination, missing source
            MountRef("/mnt/fast", "/ro", read_only=True),
            MountRef("/var/lib/kubelet/pods/x/etc-hosts", "/etc/hosts"),
            MountRef("/nowhere", "/x"),
        ],
        stat=fake_stat,
    )
    assert [(h.provider.rsplit("/", 1)[-1], str(h.nodes)) for h in got] == [
        ("0000:3b:00.0", "2"),
        ("0000:af:00.0", "3"),
        ("0000:5e:00.0", "1"),
    ]
    assert {h.source for h in got} == {HintSource.MOUNTS}


def test_a_sysfs_mount_outside_the_devices_tree_gives_nothing(root: Path) -> None:
    assert topology_hints(root, mounts=[MountRef("/sys/../../etc", "/x")]) == ()
    assert topology_hints(root, mounts=[MountRef("/sys/devices/system/cpu", "/x")]) == ()


def test_a_slave_that_is_not_a_block_device_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"devices md0: slave 'sdz'"):
        write_sysfs(
            SPEC_2S2N,
            tmp_path,
            devices=[{"pci": "0000:00:1e.0", "name": "md0", "block": "9:0", "slaves": ["sdz"]}],
        )


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(nodes=st.lists(st.none() | st.integers(0, 3), min_size=1, max_size=6))
def test_every_device_hints_its_own_node(
    tmp_path_factory: pytest.TempPathFactory, nodes: list[int | None]
) -> None:
    root = tmp_path_factory.mktemp("sysfs")
    topo = build_topology(SPEC_2S2N)
    devices = [
        {"pci": f"0000:{0x10 + i:02x}:00.0", "name": f"d{i}", "node": n, "char": f"200:{i}"}
        for i, n in enumerate(nodes)
    ]
    write_sysfs(topo, root, devices=devices)
    for i, n in enumerate(nodes):
        got = topology_hints(root, devices=[DeviceRef(f"/dev/d{i}", "c", 200, i)])
        if n is None:
            assert got == ()
        else:
            assert [(h.nodes, h.cpus) for h in got] == [(IDSet([n]), topo.node_cpus(n))]
