"""Issue 24 on the real runtimes: can the runtime carry a placement's meaning?

`annotation_probe.py` sets an annotation in every container's adjustment; restarted, it
is told at Synchronize what each container carries.  The result (recorded in
docs/architecture.md, "State and restarts") decides where the daemon keeps a
placement's meaning: an annotation can be set at creation only (a ContainerUpdate has
no annotations), and a shared container's cpuset changes with every grant, so the
records live in the daemon's state directory whatever the runtime reports.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.e2e import cri
from tests.e2e.conftest import Process, python, python_env, wait_plugin_synchronized
from tests.e2e.containerd import Containerd
from tests.support.requirements import REPO
from tests.support.waiting import wait_for

PROBE = REPO / "tests" / "e2e" / "annotation_probe.py"
KEY = "probe.nri-resmgr.test/meaning"


def test_an_adjusted_annotation_is_reported_back_at_synchronize(
    containerd: Containerd, processes: Callable[..., Process]
) -> None:
    out = containerd.layout.base / "synchronize.json"
    socket = str(containerd.layout.nri_socket)
    argv = [python(), str(PROBE), "--out", str(out), "--socket", socket, "--idx", "30",
            "--name", "probe"]  # fmt: skip
    first = processes(argv, containerd.layout.base / "probe-1.log", python_env())
    wait_plugin_synchronized(containerd, "30-probe", proc=first)
    pod = cri.run_pod(containerd, "probe")
    cri.run_container(containerd, pod, "app")
    first.kill9()
    out.unlink(missing_ok=True)
    second = processes(argv, containerd.layout.base / "probe-2.log", python_env())
    wait_plugin_synchronized(containerd, "30-probe", count=2, proc=second)
    wait_for(out.exists, timeout=30, what="the probe's Synchronize report")
    seen = json.loads(out.read_text())
    assert seen["app"].get(KEY) == "app", seen["app"]
