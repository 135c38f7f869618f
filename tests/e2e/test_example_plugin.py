"""The whole stack, before the daemon: the example plugin annotate_cpuset.py on containerd.

The plugin pins each container to the CPUs named in its pod annotation
`cpuset.example.nri.io/container.NAME: "cpus=...; mems=..."`. It runs once as an external
plugin (connecting to containerd's NRI socket) and once pre-registered (a launcher in
containerd's plugin dir, started by containerd with the socket on fd 3). Each time the
containers' real cgroup cpuset must be exactly what the annotations asked for.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e import cri
from tests.e2e.conftest import (
    Process,
    plugin_failures,
    python,
    python_env,
    record_prereg_startup,
    wait_plugin_synchronized,
)
from tests.e2e.containerd import Containerd
from tests.support.requirements import REPO, online_cpus

PLUGIN = REPO / "examples" / "plugins" / "annotate_cpuset.py"
INSTALL = REPO / "examples" / "plugins" / "install-preregistered.sh"
KEY = "cpuset.example.nri.io/container."


def _pin_two_containers(ctd: Containerd) -> None:
    cpus = sorted(online_cpus())
    first, last = cpus[0], cpus[-1]
    all_cpus = cri.cpus_of  # alias for readability below
    pod = cri.run_pod(
        ctd,
        "pinned",
        annotations={KEY + "low": f"cpus={first}; mems=0", KEY + "high": f"cpus={last}"},
    )
    low = cri.run_container(ctd, pod, "low")
    high = cri.run_container(ctd, pod, "high")
    free = cri.run_container(ctd, pod, "free")  # no annotation: left alone

    assert all_cpus(ctd, low) == str(first)
    assert cri.kernel_view(ctd, low).mems == "0"
    assert all_cpus(ctd, high) == str(last)
    assert cri.parse_cpus(all_cpus(ctd, free)) == online_cpus()
    assert plugin_failures(ctd) == []
    cri.remove_pod(ctd, pod)


def test_external_plugin_pins_cpuset(
    containerd: Containerd, processes: Callable[..., Process]
) -> None:
    plugin = processes(
        [python(), str(PLUGIN), "--socket", str(containerd.layout.nri_socket),
         "--idx", "20", "--name", "annotate-cpuset"],
        containerd.layout.base / "plugin.log",
        python_env(),
    )  # fmt: skip
    wait_plugin_synchronized(containerd, "20-annotate-cpuset", proc=plugin)
    _pin_two_containers(containerd)


@pytest.mark.registration_timeout("20s")
def test_preregistered_plugin_pins_cpuset(containerd: Containerd) -> None:
    log = containerd.layout.base / "plugin-prereg.log"
    env = {**python_env(), "PYTHON": python()}
    r = subprocess.run(
        ["sh", str(INSTALL), str(PLUGIN), "20", str(containerd.layout.plugin_path), str(log)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    launcher = Path(r.stdout.strip())
    assert launcher.parent == containerd.layout.plugin_path
    containerd.restart()  # plugins are discovered at start-up only
    wait_plugin_synchronized(containerd, "20-annotate-cpuset")
    record_prereg_startup(containerd, "20-annotate-cpuset", "examples/plugins/annotate_cpuset.py")
    _pin_two_containers(containerd)


@pytest.mark.parametrize("spec", ["cpus=0; bogus=1"])
def test_plugin_error_reaches_crictl(
    containerd: Containerd, processes: Callable[..., Process], spec: str
) -> None:
    """A CreateContainer error from the plugin fails `crictl create` with its text."""
    plugin = processes(
        [python(), str(PLUGIN), "--socket", str(containerd.layout.nri_socket),
         "--idx", "20", "--name", "annotate-cpuset"],
        containerd.layout.base / "plugin.log",
        python_env(),
    )  # fmt: skip
    wait_plugin_synchronized(containerd, "20-annotate-cpuset", proc=plugin)
    pod = cri.run_pod(containerd, "broken", annotations={KEY + "c": spec})
    created, stderr = cri.create_container(containerd, pod, "c", check=False)
    assert created is None
    assert "expected keys cpus and mems" in stderr, stderr
    assert "bogus" in stderr, stderr
    assert plugin.alive()  # an error status is not fatal: the plugin stays connected
