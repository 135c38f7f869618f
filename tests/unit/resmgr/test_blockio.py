"""Block I/O classes on synthetic cgroup v1 and v2 trees."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.control.blockio import (
    BlockIOController,
    CgroupVersion,
    Device,
    cgroup_relpath,
    resolve_host_device,
)
from nri_resmgr.control.blockio_config import BlockIOConfig, parse_size
from nri_resmgr.control.names import PathEscapeError
from nri_resmgr.model import ConfigError, ResmgrError

SYSTEMD = "kubepods-besteffort-pod0f3b4c1e_1111.slice:cri-containerd:abc123"
SYSTEMD_DIR = (
    "kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod0f3b4c1e_1111.slice/cri-containerd-abc123.scope"
)
PLAIN = "/kubepods/besteffort/pod0f3b4c1e-1111/abc123"

DEVICES = {
    "/dev/sda": [Device(8, 0, "/dev/sda")],
    "/dev/sd*": [Device(8, 0, "/dev/sda"), Device(8, 16, "/dev/sdb")],
    "/dev/vda": [Device(252, 0, "/dev/vda")],
    "/dev/nvme*n1": [],
}


def fake_resolver(pattern: str) -> Sequence[Device]:
    if pattern not in DEVICES:
        raise ConfigError(f"block I/O device {pattern}: expected it to exist; found no such file")
    return DEVICES[pattern]


CONFIG: dict[str, Any] = {
    "classes": {
        "slowdisk": {
            "weight": 100,
            "devices": [
                {
                    "devices": ["/dev/sd*", "/dev/nvme*n1"],
                    "throttleReadBps": "50M",
                    "throttleWriteIOPS": 500,
                },
                {"devices": ["/dev/vda"], "throttleWriteBps": 1048576, "weight": 200},
                {"devices": ["/dev/sda"], "throttleReadIOPS": 1000},
            ],
        },
        "throttleonly": {
            "devices": [{"devices": ["/dev/vda"], "throttleReadBps": "1Gi"}],
        },
        "weighted": {"weight": 800},
    }
}

V2_EXPECTED = [
    ("io.weight", "default 100"),
    ("io.weight", "252:0 200"),
    ("io.max", "8:0 rbps=52428800 wbps=max riops=1000 wiops=500"),
    ("io.max", "8:16 rbps=52428800 wbps=max riops=max wiops=500"),
    ("io.max", "252:0 rbps=max wbps=1048576 riops=max wiops=max"),
]
V1_EXPECTED = [
    ("blkio.bfq.weight", "100"),
    ("blkio.bfq.weight_device", "252:0 200"),
    ("blkio.throttle.read_bps_device", "8:0 52428800"),
    ("blkio.throttle.read_bps_device", "8:16 52428800"),
    ("blkio.throttle.read_bps_device", "252:0 0"),
    ("blkio.throttle.write_bps_device", "8:0 0"),
    ("blkio.throttle.write_bps_device", "8:16 0"),
    ("blkio.throttle.write_bps_device", "252:0 1048576"),
    ("blkio.throttle.read_iops_device", "8:0 1000"),
    ("blkio.throttle.read_iops_device", "8:16 0"),
    ("blkio.throttle.read_iops_device", "252:0 0"),
    ("blkio.throttle.write_iops_device", "8:0 500"),
    ("blkio.throttle.write_iops_device", "8:16 500"),
    ("blkio.throttle.write_iops_device", "252:0 0"),
]
V2_FILES = ("io.weight", "io.max", "cgroup.procs")
V1_FILES = (
    "blkio.bfq.weight",
    "blkio.bfq.weight_device",
    "blkio.throttle.read_bps_device",
    "blkio.throttle.write_bps_device",
    "blkio.throttle.read_iops_device",
    "blkio.throttle.write_iops_device",
    "tasks",
)


def make_v2(root: Path, rel: str, files: Sequence[str] = V2_FILES) -> Path:
    (root).mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    d = root / rel
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_text("")
    return d


def make_v1(top: Path, rel: str, files: Sequence[str] = V1_FILES) -> Path:
    root = top / "blkio"
    root.mkdir(parents=True, exist_ok=True)
    (root / "blkio.throttle.read_bps_device").write_text("")
    (root / "blkio.reset_stats").write_text("")
    d = root / rel
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_text("")
    return d


def ctl(root: Path, **kw: Any) -> BlockIOController:
    return BlockIOController(
        root, BlockIOConfig.model_validate(CONFIG), resolve_device=fake_resolver, **kw
    )


def listing(top: Path) -> dict[str, str]:
    return {str(p.relative_to(top)): p.read_text() for p in sorted(top.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("cgroups_path", "rel"),
    [(SYSTEMD, SYSTEMD_DIR), (PLAIN, PLAIN.lstrip("/"))],
    ids=["systemd", "plain"],
)
def test_v2_exact_writes_and_files(tmp_path: Path, cgroups_path: str, rel: str) -> None:
    d = make_v2(tmp_path, rel)
    c = ctl(tmp_path)
    assert c.version is CgroupVersion.V2
    writes = c.apply(cgroups_path, "slowdisk")
    assert [(p.relative_to(d.resolve()).as_posix(), v) for p, v in writes] == V2_EXPECTED
    # a regular file keeps the last write; the kernel would keep one rule per device
    assert listing(d) == {
        "io.weight": "252:0 200",
        "io.max": "252:0 rbps=max wbps=1048576 riops=max wiops=max",
        "cgroup.procs": "",
    }


def test_v1_exact_writes_through_parent_root(tmp_path: Path) -> None:
    d = make_v1(tmp_path, SYSTEMD_DIR)
    c = ctl(tmp_path)  # /sys/fs/cgroup-like parent holding blkio/
    assert (c.version, c.root) == (CgroupVersion.V1, tmp_path / "blkio")
    writes = c.apply(SYSTEMD, "slowdisk")
    assert [(p.name, v) for p, v in writes] == V1_EXPECTED
    assert all(p.parent == d.resolve() for p, _ in writes)
    assert listing(d)["blkio.bfq.weight"] == "100"
    assert listing(d)["blkio.throttle.write_iops_device"] == "252:0 0"


def test_v1_prefers_cfq_weight_when_present(tmp_path: Path) -> None:
    make_v1(tmp_path, "pod", files=("blkio.weight", "blkio.bfq.weight"))
    writes = ctl(tmp_path / "blkio").apply("/pod", "weighted")
    assert [(p.name, v) for p, v in writes] == [("blkio.weight", "800")]


def test_v2_falls_back_to_bfq_weight(tmp_path: Path) -> None:
    d = make_v2(tmp_path, "pod", files=("io.bfq.weight", "io.max"))
    writes = ctl(tmp_path).apply("pod", "weighted")
    assert writes == [(d.resolve() / "io.bfq.weight", "800")]
    assert (d / "io.bfq.weight").read_text() == "800"


@pytest.mark.parametrize("version", [CgroupVersion.V1, CgroupVersion.V2])
def test_weight_without_weight_file_is_refused(tmp_path: Path, version: CgroupVersion) -> None:
    d = tmp_path / "pod"
    d.mkdir()
    before = listing(tmp_path)
    with pytest.raises(ResmgrError) as info:
        ctl(tmp_path, version=version).apply("pod", "weighted")
    files = (
        "io.weight or io.bfq.weight"
        if version is CgroupVersion.V2
        else ("blkio.weight or blkio.bfq.weight")
    )
    assert str(info.value) == (
        f"block I/O class weighted: expected a weight file ({files}; the io controller "
        "with iocost or the BFQ scheduler); found neither"
    )
    assert listing(tmp_path) == before


def test_throttle_only_class_on_v1_without_weight_files(tmp_path: Path) -> None:
    d = make_v1(
        tmp_path,
        "pod",
        files=(
            "blkio.throttle.read_bps_device",
            "blkio.throttle.write_bps_device",
            "blkio.throttle.read_iops_device",
            "blkio.throttle.write_iops_device",
        ),
    )
    writes = ctl(tmp_path).apply("/pod", "throttleonly")
    assert [(p.name, v) for p, v in writes] == [
        ("blkio.throttle.read_bps_device", "252:0 1073741824"),
        ("blkio.throttle.write_bps_device", "252:0 0"),
        ("blkio.throttle.read_iops_device", "252:0 0"),
        ("blkio.throttle.write_iops_device", "252:0 0"),
    ]
    assert (d / "blkio.throttle.read_bps_device").read_text() == "252:0 1073741824"


def test_dry_run_writes_nothing_and_needs_no_cgroup(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("io\n")
    before = listing(tmp_path)
    writes = ctl(tmp_path, dry_run=True).apply(SYSTEMD, "slowdisk")
    assert [(p.relative_to(tmp_path.resolve()).as_posix(), v) for p, v in writes] == [
        (f"{SYSTEMD_DIR}/{name}", v) for name, v in V2_EXPECTED
    ]
    assert listing(tmp_path) == before
    assert not (tmp_path / "kubepods.slice").exists()


def test_missing_cgroup_is_reported(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("io\n")
    with pytest.raises(
        ResmgrError,
        match=r"cri-containerd-abc123\.scope \(kubepods-besteffort-"
        r".*\): expected the runtime to have created it; found no such directory",
    ):
        ctl(tmp_path).apply(SYSTEMD, "slowdisk")


def test_unknown_class(tmp_path: Path) -> None:
    make_v2(tmp_path, "pod")
    with pytest.raises(ResmgrError) as info:
        ctl(tmp_path).apply("pod", "fast")
    assert str(info.value) == (
        "block I/O class 'fast': expected one of slowdisk, throttleonly, weighted"
    )


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (SYSTEMD, tuple(SYSTEMD_DIR.split("/"))),
        (
            "kubepods-pod12_34.slice:crio:ff",
            ("kubepods.slice", "kubepods-pod12_34.slice", "crio-ff.scope"),
        ),
        ("-.slice:docker:x", ("docker-x.scope",)),
        ("system.slice:containerd:abc", ("system.slice", "containerd-abc.scope")),
        ("/a/b/c", ("a", "b", "c")),
        ("a//b/", ("a", "b")),
    ],
)
def test_cgroup_relpath(path: str, expected: tuple[str, ...]) -> None:
    assert cgroup_relpath(path) == expected


@pytest.mark.parametrize(
    "path",
    [
        "../../etc",
        "/a/../../etc",
        "",
        "/",
        "a\x00b",
        "a\nb",
        "kube--x.slice:p:n",
        "kube.slice:p:../../x",
        "notaslice:p:n",
    ],
)
def test_hostile_cgroup_paths_refused(tmp_path: Path, path: str) -> None:
    make_v2(tmp_path / "cg", "pod")
    before = listing(tmp_path)
    with pytest.raises(ResmgrError, match=r"cgroups path .*: expected"):
        ctl(tmp_path / "cg").apply(path, "throttleonly")
    assert listing(tmp_path) == before


def test_symlink_out_of_root_refused(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    make_v2(root, "pod")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "io.max").write_text("")
    os.symlink(outside, root / "escape")
    with pytest.raises(PathEscapeError, match=r"expected to stay inside"):
        ctl(root).apply("/escape", "throttleonly")
    assert (outside / "io.max").read_text() == ""


@pytest.mark.parametrize(
    ("classes", "fragment"),
    [
        ({"c": {"weight": 5}}, "greater than or equal to 10"),
        ({"c": {"weight": 1001}}, "less than or equal to 1000"),
        ({"c": {"devices": [{"devices": ["/dev/sda"]}]}}, "expected a weight or a throttle"),
        (
            {"c": {"devices": [{"devices": ["sda"], "weight": 10}]}},
            "expected a block device path or glob under /dev/; found 'sda'",
        ),
        (
            {"c": {"devices": [{"devices": ["/etc/passwd"], "weight": 10}]}},
            "expected a block device path or glob under /dev/; found '/etc/passwd'",
        ),
        (
            {"c": {"devices": [{"devices": ["/dev/../etc/passwd"], "weight": 10}]}},
            "expected a device path without '..'",
        ),
        (
            {
                "c": {
                    "devices": [
                        {"devices": ["/dev/sda"], "throttleReadBps": "99999999999999999999999T"}
                    ]
                }
            },
            "expected a positive byte count like 50M",
        ),
        (
            {"c": {"devices": [{"devices": ["/dev/sda"], "throttleReadBps": "9999999999T"}]}},
            "expected a byte count of at most 9223372036854775807",
        ),
        (
            {"c": {"devices": [{"devices": ["/dev/sda"], "throttleWriteBps": 1 << 63}]}},
            "expected a byte count of at most 9223372036854775807",
        ),
        (
            {"c": {"devices": [{"devices": ["/dev/sda"], "throttleReadIOPS": 1 << 32}]}},
            "less than or equal to 4294967295",
        ),
        ({"c": {"devices": [{"devices": [], "weight": 10}]}}, "expected at least one device"),
        (
            {"c": {"devices": [{"devices": ["/dev/sda"], "throttleReadBps": "fast"}]}},
            "expected a positive byte count like 50M",
        ),
        ({"c": {"devices": [{"devices": ["/dev/sda"], "throttleReadIOPS": 0}]}}, "greater than 0"),
        ({"../x": {"weight": 10}}, "control.blockio.classes.../x: expected 1-64"),
        ({"c": {"wieght": 10}}, "Extra inputs are not permitted"),
    ],
    ids=[
        "weight-low",
        "weight-high",
        "empty-limits",
        "relative-path",
        "not-under-dev",
        "dotdot",
        "rate-23-digits",
        "rate-above-2**63",
        "int-rate-above-2**63",
        "iops-above-2**32",
        "no-devices",
        "bad-size",
        "zero-iops",
        "hostile-name",
        "typo",
    ],
)
def test_config_errors(classes: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        BlockIOConfig.model_validate({"classes": classes})
    assert fragment in str(info.value)


def test_unknown_device_path_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("")
    config = BlockIOConfig.model_validate(
        {"classes": {"c": {"devices": [{"devices": ["/dev/nosuch"], "weight": 10}]}}}
    )
    with pytest.raises(ConfigError, match=r"^block I/O device /dev/nosuch: expected it to exist"):
        BlockIOController(tmp_path, config, resolve_device=fake_resolver)


@pytest.mark.parametrize(
    ("text", "value"),
    [("50M", 52428800), ("1Gi", 1 << 30), ("10k", 10240), ("512", 512), ("2MiB", 2 << 20), (7, 7)],
)
def test_parse_size(text: object, value: int) -> None:
    assert parse_size(text) == value


def test_detect_version_refuses_unknown_root(tmp_path: Path) -> None:
    with pytest.raises(ResmgrError, match=r"expected a cgroup v2 mount .* found neither"):
        BlockIOController(tmp_path, BlockIOConfig())


def test_host_resolver_on_this_machine() -> None:
    """Resolution of real device nodes by st_rdev (a glob matching none is empty)."""
    assert resolve_host_device("/dev/nonexistent-disk-*") == []
    with pytest.raises(ConfigError, match=r"/dev/null: expected a block device; found mode c"):
        resolve_host_device("/dev/null")
    disks = [p.name for p in Path("/sys/block").iterdir()] if Path("/sys/block").is_dir() else []
    for name in disks:
        node = Path("/dev") / name
        if node.exists():
            major, minor = (Path("/sys/block") / name / "dev").read_text().strip().split(":")
            assert resolve_host_device(str(node)) == [Device(int(major), int(minor), str(node))]
            break
