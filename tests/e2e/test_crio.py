"""What only CRI-O shows: its cgroup layout under cgroupfs, and enable-nri's drop-in read back.

The scenarios of test_daemon.py, test_kill9.py, test_reset.py and test_example_plugin.py
run on CRI-O through the `release` parametrisation (id `crio`); these two check the CRI-O specifics
the product relies on, from the kernel and from CRI-O's own `config` dump.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.e2e import cri
from tests.e2e import crio as criomod
from tests.e2e.containerd import Containerd, Release
from tests.e2e.layout import Layout

pytestmark = pytest.mark.parametrize("release", [criomod.CRIO], ids=["crio"])


def test_cgroupfs_layout_is_crio_id_under_the_pod_parent(
    release: Release, containerd: Containerd
) -> None:
    """cgroupfs: the container is in `<parent>/crio-<id>` (no `.scope`, that is systemd's
    naming). Its conmon is not in the pod: with cgroupfs CRI-O moves conmon to
    `<parent>/crio-conmon-<id>` only when a workload gives it CPU resources, so conmon
    stays in CRI-O's own cpuset cgroup, beyond any placement a plugin makes."""
    pod = cri.run_pod(containerd, "web", qos=cri.QoS.BURSTABLE)
    c = cri.run_container(containerd, pod, "app", resources=cri.BURSTABLE_SMALL)
    pid = cri.container_pid(containerd, c)
    want = cri.CGROUP_ROOT / "cpuset" / pod.cgroup_parent.lstrip("/") / f"crio-{c.id}"
    assert cri.cgroup_dir(pid, "cpuset") == want
    assert pid in {int(p) for p in (want / "cgroup.procs").read_text().split()}
    assert not want.with_name(f"crio-conmon-{c.id}").exists()
    conmons = [p for p in _pids_of("conmon") if c.id.encode() in _cmdline(p)]
    assert len(conmons) == 1, conmons
    assert containerd.proc is not None
    crio_cgroup = cri.cgroup_dir(containerd.proc.pid, "cpuset")
    assert cri.cgroup_dir(conmons[0], "cpuset") == crio_cgroup


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _pids_of(name: str) -> list[int]:
    return [
        int(e.name)
        for e in Path("/proc").iterdir()
        if e.name.isdigit() and _cmdline(int(e.name)).split(b"\0", 1)[0].endswith(name.encode())
    ]


def test_enable_nri_dropin_is_what_crio_runs_with(
    release: Release, containerd_bins: dict[str, Path], crictl_bin: Path, short_tmp: Path
) -> None:
    """`crio config` (CRI-O's effective configuration) shows NRI enabled at our socket
    with our timeouts: the drop-in `nri-resmgr enable-nri --runtime crio` wrote."""
    ctd = criomod.Crio(
        containerd_bins, crictl_bin, Layout(short_tmp),
        request_timeout="3s", registration_timeout="7s",
    )  # fmt: skip
    assert ctd.nri_dropin.exists()
    r = subprocess.run(
        [*ctd.command(), "config"], capture_output=True, text=True, env=ctd.env(), timeout=60
    )
    assert r.returncode == 0, r.stderr
    nri = tomllib.loads(r.stdout)["crio"]["nri"]
    # `crio config` comments out values equal to the default, and enable_nri defaults to
    # true in 1.36: absent means on; the drop-in's other keys are not defaults
    assert nri.get("enable_nri", True) is True
    assert nri["nri_listen"] == str(ctd.layout.nri_socket)
    assert nri["nri_plugin_request_timeout"] == "3s"
    assert nri["nri_plugin_registration_timeout"] == "7s"
    assert nri["nri_plugin_dir"] == str(ctd.layout.plugin_path)
