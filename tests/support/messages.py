"""NRI messages as containerd sends them for the kubelet's pods, for daemon tests.

`pod(name, qos)` is a `PodSandbox` whose cgroup parent names its QoS class the way the
kubelet's systemd driver does; `ctr(pod, name, cpu=..., limit=..., memory=...)` a
`Container` of it (CREATED unless told) with the resources the kubelet writes for those
requests and limits, and ``cpus`` as its current cpuset; `guaranteed` a container whose
requests equal its limits.  `cpus_of` reads the cpuset an update sets.
"""

from __future__ import annotations

from typing import Any

from nri_api import api
from nri_resmgr.model import QoSClass
from nri_resmgr.simulator.kubelet import container_resources
from nri_resmgr.simulator.scenario import ContainerSpec, Resources

__all__ = ["cpus_of", "ctr", "guaranteed", "pod"]

_QOS_WORD = {QoSClass.GUARANTEED: "", QoSClass.BURSTABLE: "-burstable",
             QoSClass.BEST_EFFORT: "-besteffort"}  # fmt: skip


"""+"""


def pod(name: str, qos: QoSClass, *, namespace: str = "default") -> api.PodSandbox:
    """The sandbox of pod `name` (id ``sb-<name>``) in the kubelet's cgroup of its `qos`."""
    uid = f"00000000-0000-0000-0000-{abs(hash(name)) % 10**12:012d}"
    s = api.PodSandbox(id=f"sb-{name}", name=name, uid=uid, namespace=namespace)
    s.linux.cgroup_parent = f"kubepods{_QOS_WORD[qos]}-pod{uid.replace('-', '_')}.slice"
    return s


def ctr(
    sandbox: api.PodSandbox,
    name: str,
    *,
    cpu: str | None = None,
    limit: str | None = None,
    memory: str | None = None,
    cpus: str = "",
    state: int = api.ContainerState.CONTAINER_CREATED,
) -> api.Container:
    """Container `name` of `sandbox` (id ``<pod>-<name>``) with the resources the kubelet
    writes for the requests `cpu`/`memory` and the limits `limit`/`memory`."""
    spec = ContainerSpec(
        name=name,
        requests=Resources(cpu=cpu, memory=memory),
        limits=Resources(cpu=limit, memory=memory if limit else None),
    )
    c = api.Container(
        id=f"{sandbox.name}-{name}",
        pod_sandbox_id=sandbox.id,
        name=name,
        state=state,  # type: ignore[arg-type]
    )
    c.linux.cgroups_path = f"{sandbox.linux.cgroup_parent}:cri-containerd:{c.id}"
    c.linux.resources.CopyFrom(container_resources(spec))
    if cpus:
        c.linux.resources.cpu.cpus = cpus
    return c


def guaranteed(sandbox: api.PodSandbox, name: str, n: str, **kw: Any) -> api.Container:
    """A Guaranteed container of `n` CPUs (and 100M of memory)."""
    return ctr(sandbox, name, cpu=n, limit=n, memory="100M", **kw)


def cpus_of(update: api.ContainerUpdate) -> str:
    """The cpuset `update` sets ("" for none)."""
    return update.linux.resources.cpu.cpus
