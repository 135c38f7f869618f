"""nri-resmgr with policy ``balloons`` on a real containerd, read back from cgroups.

The machine class has CPUs 0-1.  CPU 0 is reserved: the kube-system pod runs in the
reserved balloon on it.  Balloon type ``app`` (namespace e2e, one CPU) holds the other
pods, on CPU 1, with NUMA node 0's memory.  Both are read from the container's
``cpuset.cpus``/``cpuset.mems`` and its init's ``Cpus_allowed_list``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.e2e import cri
from tests.e2e.conftest import plugin_failures
from tests.e2e.containerd import Containerd
from tests.e2e.resmgr import Daemon, running_daemon
from tests.e2e.resmgr import daemon as daemon  # the fixture

BALLOONS: dict[str, Any] = {
    "policy": "balloons",
    "policyConfig": {
        "reservedResources": {"cpu": "cpuset:0"},
        "pinCPU": True,
        "pinMemory": True,
        "balloonTypes": [
            {"name": "app", "namespaces": ["e2e"], "minCPUs": 1, "maxCPUs": 1},
        ],
    },
}


def test_balloons_two_types_in_cgroups(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    running_daemon(daemon, BALLOONS)
    ctd = containerd
    web = cri.run_pod(ctd, "web", qos=cri.QoS.BURSTABLE)
    a = cri.run_container(ctd, web, "a", resources=cri.BURSTABLE_SMALL)
    b = cri.run_container(ctd, web, "b", resources=cri.BURSTABLE_SMALL)
    sys_pod = cri.run_pod(ctd, "dns", qos=cri.QoS.BURSTABLE, namespace="kube-system")
    k = cri.run_container(ctd, sys_pod, "coredns", resources=cri.BURSTABLE_SMALL)
    for c, want in ((a, "1"), (b, "1"), (k, "0")):
        view = cri.kernel_view(ctd, c)
        assert (view.cpus, view.mems) == (want, "0"), f"{c.pod.name}/{c.name}: {view}"
        assert view.allowed_cpus == want
    assert plugin_failures(ctd) == []
