"""Hostile sysfs trees and hostile container devices and mounts (`topology.devices`).

Each input must resolve to hints or to no hint, quickly: never an exception out of
`topology_hints` (the daemon would answer CreateContainer with an internal error) and
never a read that blocks or has no end (the event loop would stop).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from nri_resmgr.model import DeviceRef, HintSource, MountRef
from nri_resmgr.topology.devices import device_hints, topology_hints
from nri_resmgr.topology.synthetic import write_sysfs
from tests.support.builders import SPEC_2S2N

DEVICES = [{"pci": "0000:3b:00.0", "name": "nvme0n1", "node": 2, "block": "259:0"}]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_sysfs(SPEC_2S2N, tmp_path, devices=DEVICES)
    return tmp_path


def _pci(root: Path) -> Path:
    return root / "sys/devices/pci0000:3b/0000:3b:00.0"


def _within(seconds: float, fn: object) -> object:
    """`fn()` run in a thread that must finish within `seconds` (a blocked read fails)."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)  # type: ignore[operator]
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s (blocked?)"
    assert out, "raised (see the thread's traceback above)"
    return out[0]


def test_a_symlink_loop_for_a_device_number_gives_no_hint(root: Path) -> None:
    char = root / "sys/dev/char"
    char.mkdir(parents=True, exist_ok=True)
    (char / "5:1").symlink_to("loop")
    (char / "loop").symlink_to("5:1")
    assert device_hints(root, kind="c", major=5, minor=1, source=HintSource.DEVICES) == []


def test_a_symlink_loop_among_raid_slaves_gives_the_other_hints(root: Path) -> None:
    slaves = _pci(root) / "nvme/nvme0/nvme0n1/slaves"
    slaves.mkdir(parents=True)
    (slaves / "a").symlink_to("b")
    (slaves / "b").symlink_to("a")
    got = device_hints(root, kind="b", major=259, minor=0, source=HintSource.DEVICES)
    assert [str(h.nodes) for h in got] == ["2"]


@pytest.mark.parametrize("source", ["/data\x00/x", "/sys/\x00devices", "\x00"])
def test_a_mount_source_with_nul_gives_no_hint(root: Path, source: str) -> None:
    mount = MountRef(source=source, destination="/data", read_only=False)
    assert topology_hints(root, mounts=[mount]) == ()


def test_a_fifo_in_place_of_a_sysfs_attribute_does_not_block(root: Path) -> None:
    node = _pci(root) / "numa_node"
    node.unlink()
    os.mkfifo(node)
    dev = DeviceRef("/dev/nvme0n1", "b", 259, 0)
    got = _within(5, lambda: topology_hints(root, devices=[dev]))
    assert isinstance(got, tuple)
    assert [(str(h.cpus), str(h.nodes)) for h in got] == [("4-5,12-13", "")]


def test_an_endless_sysfs_attribute_is_not_read_to_its_end(root: Path) -> None:
    node = _pci(root) / "numa_node"
    node.unlink()
    node.symlink_to("/dev/zero")
    big = _pci(root) / "local_cpulist"
    big.write_text("4" + ",4" * 2_000_000)
    dev = DeviceRef("/dev/nvme0n1", "b", 259, 0)
    assert _within(5, lambda: topology_hints(root, devices=[dev])) == ()


def test_a_device_link_outside_the_root_reads_nothing_there(
    root: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside")
    (outside / "numa_node").write_text("1\n")
    (outside / "slaves").mkdir()
    (outside / "slaves" / "x").symlink_to(outside)
    char = root / "sys/dev/char"
    char.mkdir(parents=True, exist_ok=True)
    (char / "7:7").symlink_to(outside)
    assert device_hints(root, kind="c", major=7, minor=7, source=HintSource.DEVICES) == []
    mount = MountRef(source="/sys/../../../" + str(outside), destination="/d", read_only=False)
    assert topology_hints(root, mounts=[mount]) == ()


@pytest.mark.parametrize(
    ("kind", "major", "minor"),
    [("c", 1 << 40, 0), ("b", 259, -1), ("b", 259, 1 << 63), ("c", -5, 3), ("x", 1, 1)],
)
def test_device_numbers_that_do_not_exist_give_no_hint(
    root: Path, kind: str, major: int, minor: int
) -> None:
    assert topology_hints(root, devices=[DeviceRef("/dev/x", kind, major, minor)]) == ()
