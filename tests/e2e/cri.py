"""Pods and containers through crictl, and what the kernel shows for them.

Pods run in the host network namespace (no CNI). Their cgroup parent follows the
kubelet's cgroupfs layout (`/kubepods[/burstable|/besteffort]/pod<uid>`, below
`/nri-resmgr-e2e` so the suite never touches a real kubelet's cgroups), with a fresh
uid each time, and container resources are derived from requests/limits the way the
kubelet derives them, so a policy sees what it would see on a real node.

Cgroup reads go through the container's init pid: `/proc/<pid>/cgroup` names the cpuset
and blkio cgroups, whose files are then read under `/sys/fs/cgroup/<controller>/`
(cgroup v1), and `/proc/<pid>/status` gives `Cpus_allowed_list` and `Mems_allowed_list`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import os
import signal
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.e2e.containerd import TEST_IMAGE, Containerd

CGROUP_ROOT = Path("/sys/fs/cgroup")


class QoS(enum.StrEnum):
    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BESTEFFORT = "besteffort"


@dataclasses.dataclass(frozen=True, slots=True)
class Resources:
    """A container's requests/limits in kubelet units (millicores, bytes)."""

    cpu_request: int = 0
    cpu_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0
    #: the kubelet's is 1000 for these; a test that must outlive another job's memory
    #: exhaustion on a shared machine asks for 0 (the runtime keeps it at or above its own)
    oom_score_adj: int = 1000

    @property
    def qos(self) -> QoS:
        if not (self.cpu_request or self.cpu_limit or self.memory_request or self.memory_limit):
            return QoS.BESTEFFORT
        if (
            self.cpu_limit
            and self.memory_limit
            and self.cpu_request in (0, self.cpu_limit)
            and self.memory_request in (0, self.memory_limit)
        ):
            return QoS.GUARANTEED
        return QoS.BURSTABLE

    def linux(self) -> dict[str, Any]:
        """LinuxContainerResources as the kubelet fills them (cgroup v1)."""
        request = self.cpu_request or self.cpu_limit
        shares = max(2, request * 1024 // 1000) if request else 2
        out: dict[str, Any] = {"cpu_shares": shares, "oom_score_adj": self.oom_score_adj}
        if self.cpu_limit:
            out["cpu_period"] = 100000
            out["cpu_quota"] = self.cpu_limit * 100
        if self.memory_limit:
            out["memory_limit_in_bytes"] = self.memory_limit
        return out


GUARANTEED_1CPU = Resources(
    cpu_request=1000, cpu_limit=1000, memory_request=64 << 20, memory_limit=64 << 20
)
BURSTABLE_SMALL = Resources(cpu_request=100, memory_request=32 << 20)
BESTEFFORT = Resources()


@dataclasses.dataclass(slots=True)
class Pod:
    id: str
    name: str
    namespace: str
    uid: str
    config_path: Path
    cgroup_parent: str


@dataclasses.dataclass(slots=True)
class Container:
    id: str
    name: str
    pod: Pod


#: top of every pod cgroup the suite makes; the kubelet layout continues below it
CGROUP_TOP = "nri-resmgr-e2e"


#: host network, a PID namespace per container (the kubelet's default), pod IPC
NAMESPACES = {"network": 2, "pid": 1, "ipc": 0}


def _pod_cgroup_parent(qos: QoS, uid: str) -> str:
    if qos is QoS.GUARANTEED:
        return f"/{CGROUP_TOP}/kubepods/pod{uid}"
    return f"/{CGROUP_TOP}/kubepods/{qos.value}/pod{uid}"


def run_pod(
    ctd: Containerd,
    name: str,
    *,
    qos: QoS = QoS.BURSTABLE,
    annotations: Mapping[str, str] | None = None,
    namespace: str = "e2e",
    check: bool = True,
) -> Pod:
    """`crictl runp` a pod in the host network namespace."""
    uid = str(uuid.uuid4())
    cgroup_parent = _pod_cgroup_parent(qos, uid)
    config = {
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "attempt": 0},
        "log_directory": str(ctd.layout.base / "pod-logs" / uid),
        "annotations": dict(annotations or {}),
        "labels": {"app": name},
        "linux": {
            "cgroup_parent": cgroup_parent,
            "security_context": {"namespace_options": NAMESPACES},
        },
    }
    path = ctd.layout.base / "specs" / f"pod-{name}-{uid[:8]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    r = ctd.crictl("runp", str(path), check=check)
    return Pod(r.stdout.strip(), name, namespace, uid, path, cgroup_parent)


def container_config(
    pod: Pod,
    name: str,
    *,
    resources: Resources = BESTEFFORT,
    annotations: Mapping[str, str] | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "attempt": 0},
        "image": {"image": TEST_IMAGE},
        "command": command or ["/bin/sleep", "2147483647"],
        "annotations": dict(annotations or {}),
        # the kubelet's labels: CRI-O names the NRI container from this one (containerd
        # from the CRI metadata), so without it a CRI-O container has no name
        "labels": {
            "container": name,
            "io.kubernetes.container.name": name,
            "io.kubernetes.pod.name": pod.name,
            "io.kubernetes.pod.namespace": pod.namespace,
            "io.kubernetes.pod.uid": pod.uid,
        },
        "log_path": f"{name}.log",
        # the kubelet repeats the pod's namespace options for each container; CRI-O
        # refuses a pod-level PID namespace in a pod without an infra container
        "linux": {
            "resources": resources.linux(),
            "security_context": {"namespace_options": NAMESPACES},
        },
    }


def create_container(
    ctd: Containerd,
    pod: Pod,
    name: str,
    *,
    resources: Resources = BESTEFFORT,
    annotations: Mapping[str, str] | None = None,
    check: bool = True,
) -> tuple[Container | None, str]:
    """`crictl create`; returns (container or None on failure, crictl's stderr).

    crictl prints the runtime's error inside a quoted Go string; its `\\"` are turned
    back into `"` so tests can look for the plugin's own text.
    """
    config = container_config(pod, name, resources=resources, annotations=annotations)
    path = ctd.layout.base / "specs" / f"ctr-{pod.name}-{name}-{pod.uid[:8]}.json"
    path.write_text(json.dumps(config))
    r = ctd.crictl("create", pod.id, str(path), str(pod.config_path), check=check)
    stderr = r.stderr.replace('\\"', '"')
    if r.returncode != 0:
        return None, stderr
    return Container(r.stdout.strip(), name, pod), stderr


def start_container(ctd: Containerd, container: Container) -> None:
    ctd.crictl("start", container.id)


def run_container(
    ctd: Containerd,
    pod: Pod,
    name: str,
    *,
    resources: Resources = BESTEFFORT,
    annotations: Mapping[str, str] | None = None,
) -> Container:
    """Create and start a container; fail loudly if either step fails."""
    c, _ = create_container(ctd, pod, name, resources=resources, annotations=annotations)
    assert c is not None
    start_container(ctd, c)
    return c


def stop_now(ctd: Containerd, pod_id: str | None = None) -> list[str]:
    """Stop the containers (of one pod, or all) without a grace period; their ids.

    The test image's `sleep` is PID 1 and ignores SIGTERM. StopPodSandbox on containerd
    does not wait; CRI-O waits the container's stop timeout (30 s) before it kills.
    """
    ids = ctd.crictl("ps", "-a", "-q", *(("--pod", pod_id) if pod_id else ())).stdout.split()
    if ids:
        ctd.crictl("stop", "--timeout", "0", *ids, check=False)
    return ids


def remove_pod(ctd: Containerd, pod: Pod) -> None:
    """Stop and remove a pod as the kubelet does: its containers removed before the sandbox.

    The kubelet removes a sandbox only once it has no containers left (its garbage
    collector keeps a sandbox that still has some).  RemovePodSandbox of a pod that still
    has containers is also a deadlock in containerd 2.x when a plugin registers meanwhile:
    it holds the NRI plugin-sync read lock (`BlockPluginSync`) and then calls its own
    RemoveContainer, which takes it again; a registering plugin's sync (the write side)
    queued between the two blocks the second read for good, and with it every later CRI
    call (docs/operations.md, "containerd stops answering after a plugin restart").
    """
    ids = stop_now(ctd, pod.id)
    ctd.crictl("stopp", pod.id)
    if ids:
        ctd.crictl("rm", *ids)
    ctd.crictl("rmp", pod.id)


def inspect(ctd: Containerd, container: Container) -> dict[str, Any]:
    r = ctd.crictl("inspect", "-o", "json", container.id)
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def container_pid(ctd: Containerd, container: Container) -> int:
    pid = int(inspect(ctd, container)["info"]["pid"])
    assert pid > 0, f"container {container.name}: no pid"
    return pid


# -- what the kernel shows ---------------------------------------------------------------


def cgroup_dir(pid: int, controller: str) -> Path:
    """The cgroup v1 directory of `pid` for `controller` (read from /proc/<pid>/cgroup)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return CGROUP_ROOT / controller / path.lstrip("/")
    raise LookupError(f"pid {pid}: no {controller} cgroup in /proc/{pid}/cgroup")


def read_cgroup(pid: int, controller: str, name: str) -> str:
    return (cgroup_dir(pid, controller) / name).read_text().strip()


@dataclasses.dataclass(frozen=True, slots=True)
class KernelView:
    cpus: str  # cpuset.cpus of the container's cgroup
    mems: str  # cpuset.mems of the container's cgroup
    allowed_cpus: str  # Cpus_allowed_list of its init process
    allowed_mems: str  # Mems_allowed_list of its init process


def kernel_view(ctd: Containerd, container: Container) -> KernelView:
    return kernel_view_of(container_pid(ctd, container))


def kernel_view_of(pid: int) -> KernelView:
    """The cpuset of `pid`'s cgroup and what its process is allowed (no crictl)."""
    status = dict(
        line.split(":\t", 1)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":\t" in line
    )
    return KernelView(
        cpus=read_cgroup(pid, "cpuset", "cpuset.cpus"),
        mems=read_cgroup(pid, "cpuset", "cpuset.mems"),
        allowed_cpus=status["Cpus_allowed_list"].strip(),
        allowed_mems=status["Mems_allowed_list"].strip(),
    )


def cpus_of(ctd: Containerd, container: Container) -> str:
    """The container's cpuset.cpus, checked to agree with its init's allowed list."""
    view = kernel_view(ctd, container)
    assert view.cpus == view.allowed_cpus, (
        f"container {container.name}: cgroup cpuset.cpus {view.cpus!r} but the process "
        f"is allowed {view.allowed_cpus!r}"
    )
    return view.cpus


def parse_cpus(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)



def kill_cgroup_tree(controller: str, relative: str) -> None:
    """SIGKILL every process in `relative` and below (a safety net after a failure)."""
    top = CGROUP_ROOT / controller / relative.lstrip("/")
    if not top.is_dir():
        return
    for procs in top.rglob("cgroup.procs"):
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except OSError:
            continue
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def remove_cgroup_tree(controller: str, relative: str) -> None:
    """rmdir `relative` and its now-empty parents up to /nri-resmgr-e2e (best effort)."""
    path = CGROUP_ROOT / controller / relative.lstrip("/")
    top = CGROUP_ROOT / controller / CGROUP_TOP
    while path == top or top in path.parents:
        try:
            path.rmdir()
        except OSError:
            return
        path = path.parent
