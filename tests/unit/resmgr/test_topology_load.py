"""Loading topologies: archives (and unsafe members), spec files, inline specs, examples."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import (
    EXAMPLES_DIR,
    LoadError,
    UnsafeArchiveError,
    extract_archive,
    load_topology,
    parse_inline_spec,
)
from nri_resmgr.topology.model import TopologyError
from nri_resmgr.topology.synthetic import SpecError, build_topology, write_sysfs

SMALL = {"packages": 2, "nodes": 1, "cores": 2, "threads": 2, "memory": "1G"}


def _make_archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


@pytest.mark.parametrize("suffix", [".tar.gz", ".tar.xz", ".tar.bz2", ".tgz", ".tar"])
def test_archive_of_written_sysfs_loads(tmp_path: Path, suffix: str) -> None:
    root = tmp_path / "root"
    expected = write_sysfs(SMALL, root)
    compression = {".tar.gz": "gz", ".tgz": "gz", ".tar.xz": "xz", ".tar.bz2": "bz2"}
    archive = tmp_path / f"snap{suffix}"
    with tarfile.open(archive, f"w:{compression.get(suffix, '')}") as tar:  # type: ignore[call-overload]
        tar.add(root / "sys", arcname="sys")
    loaded = load_topology(archive)
    assert loaded == expected
    assert loaded.source == str(archive)


def test_archive_with_one_top_directory(tmp_path: Path) -> None:
    root = tmp_path / "root"
    expected = write_sysfs(SMALL, root)
    archive = tmp_path / "wrapped.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root / "sys", arcname="machine/sys")
    assert load_topology(archive) == expected


@pytest.mark.parametrize(
    ("member", "why"),
    [
        pytest.param(_info("/etc/evil"), "has an absolute path", id="absolute"),
        pytest.param(_info("sys/../../evil"), "has a '..' component", id="dotdot"),
        pytest.param(
            _info("sys/x", tarfile.SYMTYPE, "/etc/passwd"),
            "symbolic link to the absolute path '/etc/passwd'",
            id="abs-symlink",
        ),
        pytest.param(
            _info("sys/x", tarfile.SYMTYPE, "../../etc"),
            "symbolic link to '../../etc', outside the archive",
            id="escaping-symlink",
        ),
        pytest.param(
            _info("sys/x", tarfile.LNKTYPE, "../outside"),
            "hard link to '../outside', outside the archive",
            id="escaping-hardlink",
        ),
        pytest.param(_info("sys/dev", tarfile.CHRTYPE), "is a device", id="device"),
        pytest.param(_info("sys/fifo", tarfile.FIFOTYPE), "is a device, FIFO", id="fifo"),
    ],
)
def test_unsafe_members_are_refused(tmp_path: Path, member: tarfile.TarInfo, why: str) -> None:
    ok = _info("sys/devices/system/cpu/online")
    archive = _make_archive(
        tmp_path / "bad.tar.gz",
        [(ok, b"0\n"), (member, b"x" if member.isfile() else None)],
    )
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(UnsafeArchiveError, match=f"member .* {why}"):
        extract_archive(archive, dest)
    assert list(dest.iterdir()) == []  # nothing was unpacked
    assert not (tmp_path / "evil").exists() and not (tmp_path / "outside").exists()
    with pytest.raises(UnsafeArchiveError):
        load_topology(archive)


def test_links_inside_the_archive_are_fine(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write_sysfs(SMALL, root)  # cpuN/nodeM are relative links inside the tree
    archive = tmp_path / "ok.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(root / "sys", arcname="sys")
    dest = tmp_path / "dest"
    dest.mkdir()
    assert extract_archive(archive, dest) == dest
    assert (dest / "sys/devices/system/cpu/cpu0/node0").is_symlink()


def test_archive_without_sys(tmp_path: Path) -> None:
    archive = _make_archive(tmp_path / "empty.tar.gz", [(_info("readme.txt"), b"hi")])
    with pytest.raises(LoadError, match="expected a sysfs snapshot with a top-level 'sys/'"):
        load_topology(archive)


def test_not_an_archive(tmp_path: Path) -> None:
    bogus = tmp_path / "x.tar.xz"
    bogus.write_text("not a tar")
    with pytest.raises(LoadError, match=r"x.tar.xz: expected a readable tar archive"):
        load_topology(bogus)


# ---- specs ---------------------------------------------------------------------------


def test_yaml_and_json_spec_files(tmp_path: Path) -> None:
    y = tmp_path / "m.yaml"
    y.write_text("packages: 2\nnodes: 1\ncores: 2\nthreads: 2\nmemory: 1G\n")
    j = tmp_path / "m.json"
    j.write_text(json.dumps(SMALL))
    assert load_topology(y) == load_topology(j) == build_topology(SMALL)
    assert load_topology(y).source == str(y)


def test_spec_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("packages: 0\n")
    with pytest.raises(SpecError, match=r"bad.yaml: packages: .*greater than or equal to 1"):
        load_topology(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("packages: [\n")
    with pytest.raises(LoadError, match=r"broken.yaml: expected a YAML mapping"):
        load_topology(broken)
    scalar = tmp_path / "scalar.json"
    scalar.write_text("3")
    with pytest.raises(LoadError, match=r"scalar.json: expected a mapping of spec fields, found"):
        load_topology(scalar)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "packages=2,nodes=2,cores=4,threads=2",
            {"packages": "2", "nodes": "2", "cores": "4", "threads": "2"},
        ),
        ("cores=4,isolated=2-3,8,threads=1", {"cores": "4", "isolated": "2-3,8", "threads": "1"}),
        ("packages=2 cores=4", {"packages": "2", "cores": "4"}),
        ("{packages: 2, nodes: 2}", {"packages": 2, "nodes": 2}),
    ],
)
def test_parse_inline_spec(text: str, expected: dict[str, object]) -> None:
    assert parse_inline_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2,packages=2", r"expected key=value pairs, found '2'"),
        ("=3", r"element '=3' has no key"),
        ("{packages: [}", r"expected a YAML mapping"),
    ],
)
def test_inline_spec_errors(text: str, message: str) -> None:
    with pytest.raises(LoadError, match=message):
        load_topology(text)


def test_inline_spec_loads() -> None:
    t = load_topology("packages=2,nodes=2,cores=4,threads=2,isolated=0-1,16")
    assert len(t.online_cpus()) == 32
    assert t.isolated_cpus() == IDSet.parse("0-1,16")
    assert load_topology("{packages: 2, nodes: 2, cores: 2, threads: 2}").online_cpus() == IDSet(
        range(16)
    )
    assert load_topology(SMALL) == build_topology(SMALL)


def test_unknown_source() -> None:
    with pytest.raises(LoadError, match=r"'no-such-thing': expected a sysfs directory.*found no"):
        load_topology("no-such-thing")
    with pytest.raises(LoadError, match="empty string"):
        load_topology("  ")


def test_directory_forms(tmp_path: Path) -> None:
    expected = write_sysfs(SMALL, tmp_path)
    assert load_topology(tmp_path) == expected
    assert load_topology(tmp_path / "sys") == expected  # the sys directory itself
    with pytest.raises(LoadError, match="expected a sysfs snapshot"):
        load_topology(tmp_path / "sys" / "devices")


# ---- shipped examples ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cpus", "cores", "nodes", "cpu_nodes"),
    [
        ("two-socket", 16, 8, 4, 4),
        ("server-2s-224t", 224, 112, 4, 4),
        ("pmem-server", 64, 32, 6, 4),
        ("hbm-server", 96, 48, 8, 4),
        ("chiplet-l3", 64, 32, 2, 1),
        ("hybrid-desktop", 16, 8, 1, 1),
    ],
)
def test_examples(name: str, cpus: int, cores: int, nodes: int, cpu_nodes: int) -> None:
    assert (EXAMPLES_DIR / f"{name}.yaml").is_file()
    t = load_topology(name)
    assert len(t.online_cpus()) == cpus
    assert len(t.core_ids()) == cores
    assert len(t.nodes) == nodes
    assert len(t.node_ids(with_cpus=True)) == cpu_nodes


def test_server_224t_shape() -> None:
    t = load_topology("server-2s-224t")
    assert [len(t.package_cpus(p)) for p in t.package_ids()] == [112, 112]
    assert [len(t.cores_of(t.package_cpus(p))) for p in t.package_ids()] == [56, 56]
    assert t.package_nodes(1) == IDSet([2, 3])
    assert t.siblings(0) == IDSet([0, 112])


@pytest.mark.parametrize(
    "text",
    ["x" * 5000, "packages=1,cores=4,isolated=" + ",".join(str(i) for i in range(0, 4000, 3))],
    ids=["long-name", "long-inline-spec"],
)
def test_a_source_too_long_for_a_path_is_not_an_os_error(text: str) -> None:
    """Found by tests/fuzz/test_config_fuzz.py: ENAMETOOLONG escaped as an OSError."""
    with pytest.raises(TopologyError):  # LoadError, or SpecError for the spec's CPU list
        load_topology(text)
