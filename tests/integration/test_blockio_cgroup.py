"""Block I/O classes on this machine's real cgroup v1 blkio hierarchy (needs root).

Creates its own cgroup `/sys/fs/cgroup/blkio/nri-resmgr-it-<pid>`, applies classes to it
through `BlockIOController` with the real device resolver (st_rdev of a whole disk found
via /sys/block), reads the kernel's files back and removes the cgroup.  Weights need a
weight file in the cgroup (CFQ's blkio.weight or BFQ's blkio.bfq.weight); per-device BFQ
weights need the disk to run BFQ.  The tests check whichever the machine supports and
that the unsupported ones fail with a message naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_resmgr.control.blockio import BlockIOController, CgroupVersion
from nri_resmgr.control.blockio_config import BlockIOConfig
from nri_resmgr.model import ResmgrError
from tests.support.requirements import require

BLKIO = Path("/sys/fs/cgroup/blkio")


def whole_disk() -> tuple[str, str]:
    """(/dev node, MAJ:MIN) of a real whole disk; loop and zram devices are avoided."""
    candidates = []
    for entry in sorted(Path("/sys/block").iterdir()) if Path("/sys/block").is_dir() else []:
        dev_node = Path("/dev") / entry.name
        if dev_node.exists() and (entry / "dev").exists():
            candidates.append((entry.name.startswith(("loop", "zram", "ram")), entry.name,
                               str(dev_node), (entry / "dev").read_text().strip()))
    require(candidates, "no block device with a /dev node found via /sys/block")
    candidates.sort()
    _, _, node, number = candidates[0]
    return node, number


@pytest.fixture
def cgroup() -> Iterator[Path]:
    require(os.geteuid() == 0, "writing cgroup files needs root")
    require((BLKIO / "blkio.throttle.read_bps_device").exists(),
            f"{BLKIO} is not a cgroup v1 blkio hierarchy with throttling")
    path = BLKIO / f"nri-resmgr-it-{os.getpid()}"
    path.mkdir()
    try:
        yield path
    finally:
        path.rmdir()
    assert not path.exists()


def controller(config: dict[str, object], **kw: object) -> BlockIOController:
    return BlockIOController(Path("/sys/fs/cgroup"), BlockIOConfig.model_validate(config),
                             **kw)  # type: ignore[arg-type]


def test_throttles_are_applied_and_read_back(cgroup: Path) -> None:
    node, number = whole_disk()
    ctl = controller({"classes": {"slow": {"devices": [
        {"devices": [node], "throttleReadBps": "50M", "throttleWriteIOPS": 500}]}}})
    assert ctl.version is CgroupVersion.V1 and ctl.root == BLKIO
    writes = ctl.apply(f"/{cgroup.name}", "slow")
    assert [(p.name, v) for p, v in writes] == [
        ("blkio.throttle.read_bps_device", f"{number} 52428800"),
        ("blkio.throttle.write_bps_device", f"{number} 0"),
        ("blkio.throttle.read_iops_device", f"{number} 0"),
        ("blkio.throttle.write_iops_device", f"{number} 500"),
    ]
    assert (cgroup / "blkio.throttle.read_bps_device").read_text() == f"{number} 52428800\n"
    assert (cgroup / "blkio.throttle.write_iops_device").read_text() == f"{number} 500\n"
    # 0 removed (or never made) the rules for the unset limits
    assert (cgroup / "blkio.throttle.write_bps_device").read_text() == ""
    assert (cgroup / "blkio.throttle.read_iops_device").read_text() == ""

    # a second class replaces the limits it states
    ctl2 = controller({"classes": {"fast": {"devices": [
        {"devices": [node], "throttleWriteBps": "1G"}]}}})
    ctl2.apply(f"/{cgroup.name}", "fast")
    assert (cgroup / "blkio.throttle.read_bps_device").read_text() == ""
    assert (cgroup / "blkio.throttle.write_bps_device").read_text() == f"{number} 1073741824\n"
    assert (cgroup / "blkio.throttle.write_iops_device").read_text() == ""


def test_dry_run_leaves_the_cgroup_alone(cgroup: Path) -> None:
    node, number = whole_disk()
    ctl = controller({"classes": {"slow": {"weight": 300, "devices": [
        {"devices": [node], "throttleReadBps": 4096}]}}}, dry_run=True)
    before = {p.name: p.read_text() for p in sorted(cgroup.iterdir())
              if p.name.startswith("blkio.throttle.") and p.name.endswith("_device")}
    writes = ctl.apply(f"/{cgroup.name}", "slow")
    assert (writes[1][0].name, writes[1][1]) == ("blkio.throttle.read_bps_device",
                                                 f"{number} 4096")
    after = {p.name: p.read_text() for p in sorted(cgroup.iterdir()) if p.name in before}
    assert after == before


def test_weight_where_supported(cgroup: Path) -> None:
    weight_files = [n for n in ("blkio.weight", "blkio.bfq.weight") if (cgroup / n).exists()]
    ctl = controller({"classes": {"heavy": {"weight": 300}}})
    if not weight_files:
        with pytest.raises(ResmgrError, match=r"expected a weight file \(blkio.weight or "
                           r"blkio.bfq.weight; .*found neither"):
            ctl.apply(f"/{cgroup.name}", "heavy")
        return
    writes = ctl.apply(f"/{cgroup.name}", "heavy")
    assert [(p.name, v) for p, v in writes] == [(weight_files[0], "300")]
    # kernels print the BFQ weight as "300" or "default 300"
    assert (cgroup / weight_files[0]).read_text().strip() in ("300", "default 300")


def test_per_device_weight_needs_bfq_on_the_disk(cgroup: Path) -> None:
    node, number = whole_disk()
    require((cgroup / "blkio.bfq.weight_device").exists(), "BFQ's cgroup files are absent")
    scheduler = Path("/sys/block", Path(node).name, "queue", "scheduler").read_text()
    ctl = controller({"classes": {"dev": {"devices": [{"devices": [node], "weight": 200}]}}})
    if "[bfq]" in scheduler:
        ctl.apply(f"/{cgroup.name}", "dev")
        assert f"{number} 200" in (cgroup / "blkio.bfq.weight_device").read_text()
    else:
        with pytest.raises(ResmgrError, match=rf"blkio\.bfq\.weight_device: expected the "
                           rf"kernel to accept '{number} 200'; found .*Operation not supported"):
            ctl.apply(f"/{cgroup.name}", "dev")
