"""`nri-resmgr topology`: JSON and tree output through the real CLI dispatcher."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.cli import main
from nri_resmgr.topology.load import extract_archive
from nri_resmgr.topology.synthetic import write_sysfs
from tests.support.requirements import require_topologies


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["topology", *argv, "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_json_for_the_issue_example(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "--topology", "packages=2,dies=1,nodes=2,cores=2,threads=2,memory=2G")
    assert data["packages"] == 2
    assert data["dies"] == 2
    assert data["cores"] == 8
    assert data["threads"] == 16
    assert data["isolated"] == ""
    assert [n["id"] for n in data["numa_nodes"]] == [0, 1, 2, 3]
    node0 = data["numa_nodes"][0]
    assert node0 == {
        "id": 0, "cpus": "0-1,8-9", "online_cpus": "0-1,8-9", "memory_bytes": 2 << 30,
        "kind": "dram", "distances": [10, 11, 21, 21], "hugepages": {}, "package": 0,
        "attached_to": None,
    }
    assert [c["cpus"] for c in data["l3_caches"]] == ["0-3,8-11", "4-7,12-15"]
    assert data["netdevs"] == []


def test_json_for_a_pmem_spec_file(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "--topology", "pmem-server")
    assert data["isolated"] == "4-7,36-39"
    pmem = [n for n in data["numa_nodes"] if n["kind"] == "pmem"]
    assert [(n["id"], n["attached_to"], n["cpus"]) for n in pmem] == [(4, 0, ""), (5, 2, "")]
    assert pmem[0]["distances"][0] == 17


def test_sysfs_root_with_offline_cpu_and_netdev(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_sysfs(
        {"packages": 1, "nodes": 2, "cores": 2, "threads": 2, "offline": "7",
         "isolated": "1", "netdevs": [{"name": "eth0", "node": 1, "pci": "0000:3b:00.0"}]},
        tmp_path,
    )
    data = _json(capsys, "--sysfs-root", str(tmp_path))
    assert data["threads"] == 7
    assert data["offline"] == "7"
    assert data["netdevs"] == [{"name": "eth0", "node": 1, "pci_address": "0000:3b:00.0"}]
    assert main(["topology", "--sysfs-root", str(tmp_path)]) == 0
    tree = capsys.readouterr().out
    assert "cpu 7 (offline)" in tree
    assert "cpu 1 (isolated)" in tree
    assert "netdev eth0 (0000:3b:00.0)" in tree


def test_tree_nesting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--topology", "pmem-server"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("machine ")
    assert "4 node" not in lines[0] and "6 node(s)" in lines[0]

    def depth(prefix: str) -> int:
        line = next(x for x in lines if x.lstrip("│ ├└─").startswith(prefix))
        return (len(line) - len(line.lstrip("│ ├└─"))) // 3

    assert depth("package 0") == 1
    assert depth("die 0") == 2
    assert depth("node 0 (dram, 32.0 GiB)") == 3
    assert depth("memory node 4 (pmem, 128.0 GiB), distance 17") == 4
    assert depth("L3 0") == 4
    assert depth("core 0:") == 5
    assert any("core 4: cpu 4 (isolated), cpu 36 (isolated)" in x for x in lines)


def test_errors_go_to_stderr(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["topology", "--topology", "cores=0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nri-resmgr topology: ")
    assert "cores" in err and "greater than or equal to 1" in err
    assert main(["topology", "--sysfs-root", str(tmp_path)]) == 1
    assert "expected a sysfs tree" in capsys.readouterr().err


def test_sources_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["topology", "--topology", "two-socket", "--sysfs-root", "/"])
    assert "not allowed with" in capsys.readouterr().err


def test_json_for_real_snapshots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shared = require_topologies()
    root = extract_archive(shared / "server-2s-4n-2pmem-112t-isolated.tar.xz", tmp_path)
    data = _json(capsys, "--sysfs-root", str(root))
    assert (data["packages"], data["dies"], data["cores"], data["threads"]) == (2, 2, 56, 112)
    assert data["isolated"] == "4-7,60-63"
    kinds = {n["id"]: n["kind"] for n in data["numa_nodes"]}
    assert kinds == {0: "dram", 1: "dram", 2: "dram", 3: "dram", 4: "pmem", 5: "pmem"}
    assert data["numa_nodes"][5]["distances"] == [28, 28, 17, 28, 28, 10]
    assert data["numa_nodes"][4]["attached_to"] == 0
    # an archive given to --topology is unpacked and discovered the same way
    desktop = _json(capsys, "--topology", str(shared / "desktop-1s-1n-20t.tar.xz"))
    assert (desktop["packages"], desktop["cores"], desktop["threads"]) == (1, 10, 20)
    assert desktop["numa_nodes"][0]["memory_bytes"] == 65621548 * 1024


def test_hybrid_cores_are_tagged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "--topology", "hybrid-desktop"]) == 0
    tree = capsys.readouterr().out
    assert "core 5 [P]: cpu 5, cpu 13" in tree
    assert "core 6 [E]: cpu 6, cpu 14" in tree
    data = _json(capsys, "--topology", "hybrid-desktop")
    assert data["core_types"] == {"performance": "0-5,8-13", "efficient": "6-7,14-15"}
