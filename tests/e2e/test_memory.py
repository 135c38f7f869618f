"""Memory policy and memory QoS on a real containerd, shown by the kernel or refused.

* containerd 2.3 (NRI v0.12.0) with runc 1.4.0 built from its Go module (Debian's runc
  1.1.5 ignores the OCI memoryPolicy): a container annotated with a memory policy class
  runs with that ``set_mempolicy`` mode, which ``/proc/PID/numa_maps`` shows for every
  mapping (this machine has one memory node, 0, so ``interleave:0`` and ``bind:0``); a
  container without the annotation keeps the default policy.
* containerd 1.7 (NRI v0.8.0): the daemon refuses the memory policy at Configure, naming
  the runtime's release; containerd runs on without it.
* memory QoS on this cgroup v1 host: the daemon says at start that runc will refuse the
  cgroup v2 values, says it again for the container given values, and runc's refusal
  fails that container's start, with runc's message reaching crictl; a container without
  memory QoS values starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import cri
from tests.e2e.conftest import plugin_failures
from tests.e2e.containerd import CONTAINERD_2, CONTAINERD_17, Containerd, Release
from tests.e2e.resmgr import TOPOLOGY_AWARE, Daemon, running_daemon
from tests.e2e.resmgr import daemon as daemon  # the fixture
from tests.support.waiting import wait_for

MEMORY_POLICY: dict[str, Any] = {
    **TOPOLOGY_AWARE,
    "control": {
        "memoryPolicy": {
            "classes": [
                {"name": "spread", "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "allowed-mems"}}
            ]
        }
    },
}
MEMORY_QOS: dict[str, Any] = {
    **TOPOLOGY_AWARE,
    "control": {
        "memoryQos": {
            "classes": [{"name": "bronze", "swaplimitratio": 0.5}],
            "unifiedannotations": ["memory.swap.max", "memory.high"],
        }
    },
}
LIMITED = cri.Resources(cpu_request=200, memory_limit=64 << 20)


def _policies(pid: int) -> set[str]:
    """The policy column of every mapping in the task's numa_maps."""
    lines = Path(f"/proc/{pid}/numa_maps").read_text().splitlines()
    return {line.split()[1] for line in lines if len(line.split()) > 1}


@pytest.mark.built_runc
@pytest.mark.parametrize("release", [CONTAINERD_2], ids=["ctd2"])
def test_memory_policy_shown_by_numa_maps(
    release: Release, containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    running_daemon(daemon, MEMORY_POLICY)
    ctd = containerd
    web = cri.run_pod(
        ctd,
        "web",
        annotations={
            "class.memory-policy.nri.io": "spread",
            "policy.memory-policy.nri.io/container.bound": "{mode: MPOL_BIND, nodes: '0'}",
        },
    )
    spread = cri.run_container(ctd, web, "spread", resources=cri.BURSTABLE_SMALL)
    bound = cri.run_container(ctd, web, "bound", resources=cri.BURSTABLE_SMALL)
    plain_pod = cri.run_pod(ctd, "plain")
    plain = cri.run_container(ctd, plain_pod, "plain", resources=cri.BURSTABLE_SMALL)
    assert _policies(cri.container_pid(ctd, spread)) == {"interleave:0"}
    assert _policies(cri.container_pid(ctd, bound)) == {"bind:0"}
    assert _policies(cri.container_pid(ctd, plain)) == {"default"}
    assert plugin_failures(ctd) == []


@pytest.mark.parametrize("release", [CONTAINERD_17], ids=["ctd1.7"])
def test_memory_policy_refused_by_an_older_runtime(
    release: Release, containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    d = daemon(MEMORY_POLICY).start()
    said = wait_for(
        lambda: "configuration not supported by the runtime" in d.output(),
        timeout=60,
        what="the daemon to refuse the memory policy at Configure",
    )
    assert said
    out = d.output()
    assert "control.memoryPolicy sets LinuxMemoryPolicy (NRI v0.12.0+)" in out, out[-3000:]
    assert "found containerd 1.7.35 with NRI v0.8.0" in out, out[-3000:]
    # containerd goes on without the plugin: a pod still starts
    pod = cri.run_pod(containerd, "after")
    cri.run_container(containerd, pod, "app", resources=cri.BURSTABLE_SMALL)


@pytest.mark.parametrize("release", [CONTAINERD_2], ids=["ctd2"])
def test_memory_qos_refused_by_runc_on_cgroup_v1(
    release: Release, containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        pytest.fail("this test shows runc's cgroup v1 refusal; the host runs cgroup v2")
    d = running_daemon(daemon, MEMORY_QOS)
    ctd = containerd
    assert "memory QoS or SGX EPC limits configured on a cgroup v1 host" in d.output()
    web = cri.run_pod(ctd, "web", annotations={"class.memory-qos.nri.io": "bronze"})
    created, _ = cri.create_container(ctd, web, "app", resources=LIMITED)
    assert created is not None
    started = ctd.crictl("start", created.id, check=False)
    assert started.returncode != 0, "runc must refuse unified values on cgroup v1"
    assert "cannot use unified on cgroup v1" in started.stderr, started.stderr
    out = d.output()
    assert "memory qos on a cgroup v1 host: the runtime will refuse" in out, out[-3000:]
    assert "memory.high=33554432,memory.swap.max=max" in out, out[-3000:]
    plain_pod = cri.run_pod(ctd, "plain")
    cri.run_container(ctd, plain_pod, "app", resources=LIMITED)
