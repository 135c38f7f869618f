"""Device paths to CPUs from the topology model, and the PCI functions discovery records."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.discover import discover
from nri_resmgr.topology.locality import device_cpus
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.render import to_dict
from nri_resmgr.topology.synthetic import write_sysfs
from tests.support.builders import topo

SPEC = {"packages": 2, "nodes": 2, "cores": 4, "threads": 2, "memory": "2G"}
NIC = "0000:3b:00.0"
GPU = "0000:5e:00.0"


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    """SPEC (node 0 is 0-3,16-19) with a NIC on node 1 and a GPU whose local CPUs are 8-9."""
    root = tmp_path_factory.mktemp("sysfs")
    devices = [
        {"pci": NIC, "name": "nic", "node": 1},
        {"pci": GPU, "name": "gpu", "node": 2, "local_cpus": "8-9"},
    ]
    write_sysfs(SPEC, root, devices=devices)
    return discover(root, netlink=False)


def test_discovery_records_pci_functions(machine: Topology) -> None:
    by_address = {f.address: f for f in machine.pci_devices}
    assert sorted(by_address) == [NIC, GPU]
    assert by_address[NIC].path == f"/sys/devices/pci0000:3b/{NIC}"
    assert (by_address[NIC].node_id, by_address[GPU].cpus) == (1, IDSet.parse("8-9"))


def test_the_json_view_lists_them(machine: Topology) -> None:
    gpu = next(d for d in to_dict(machine)["pci_devices"] if d["address"] == GPU)
    assert gpu == {"address": GPU, "path": f"/sys/devices/pci0000:5e/{GPU}", "cpus": "8-9",
                   "node": 2}  # fmt: skip


def test_discovery_without_pci_records_none(tmp_path: Path) -> None:
    write_sysfs(SPEC, tmp_path)
    assert discover(tmp_path, netlink=False).pci_devices == ()


@pytest.mark.parametrize(
    ("path", "cpus"),
    [
        ("/sys/devices/system/node/node2", "8-11,24-27"),
        ("/sys/devices/system/node/node2/", "8-11,24-27"),
        ("/sys/devices/system/cpu/cpu9/cache/index0", "9,25"),
        ("/sys/devices/system/cpu/cpu9/cache/index2", "9,25"),
        ("/sys/devices/system/cpu/cpu9/cache/index3", "8-15,24-31"),
        (f"/sys/bus/pci/devices/{NIC}", "4-7,20-23"),
        (f"/sys/devices/pci0000:3b/{NIC}", "4-7,20-23"),
        (f"/sys/devices/pci0000:3b/{NIC}/net/eth0", "4-7,20-23"),
        (f"/sys/bus/pci/devices/{GPU}", "8-9"),
    ],
    ids=["node", "node/", "L1", "L2", "L3", "pci-bus", "pci-dir", "pci-child", "local_cpulist"],
)
def test_device_paths_resolve_to_cpus(machine: Topology, path: str, cpus: str) -> None:
    assert device_cpus(machine, path) == IDSet.parse(cpus)


@pytest.mark.parametrize(
    "path",
    [
        "/sys/devices/system/node/node9",
        "/sys/devices/system/cpu/cpu99/cache/index2",
        "/sys/devices/system/cpu/cpu1/cache/index7",
        "/sys/bus/pci/devices/0000:99:00.0",
        "/sys/class/net/nosuch0",
        "/dev/nvme0",
        "sys/devices/system/node/node0",
        "",
    ],
)
def test_unknown_paths_give_none(machine: Topology, path: str) -> None:
    assert device_cpus(machine, path) is None


def test_network_device_by_class_path() -> None:
    t = topo(packages=1, nodes=2, cores=2, threads=1, netdevs=[{"name": "eth0", "node": 1}])
    assert device_cpus(t, "/sys/class/net/eth0") == t.node_cpus(1)
