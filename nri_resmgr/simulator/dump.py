"""The live node as a scenario: what `nri-resmgr dump` writes and `simulate` replays.

Theory of operation: `dump_scenario` takes the daemon's machine, configuration and live
containers with their assignments and writes a scenario of one ``synchronize`` step: the
topology as an exact record (`topology.record`), the policy and its configuration, the
``control`` section, and every running pod with its containers' resources (as the
adapter read them: CPU request from CFS shares, limit from the quota, memory limit), its
annotations and labels, its QoS class, and each container's cpuset and memory nodes.
Replaying it, the simulator's plugin synchronizes those containers as a restarted daemon
would and keeps every valid placement, so each container gets the cpuset it has on the
node; with another configuration (``simulate --config NEW``) the step's ``moved`` lists
what applying NEW would move.

The CPU request survives the trip: the kubelet's shares of the adapter's reading give the
same reading again.  Pods are named by name alone in a scenario: two pods of one name in
different namespaces are refused (`DumpError`).  Pure: a mapping out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nri_resmgr.config import Config
from nri_resmgr.model import Assignment, ContainerInfo, ContainerKind, ResmgrError
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.record import to_record

__all__ = ["DumpError", "dump_scenario"]


class DumpError(ResmgrError):
    """A live node that cannot be written as a scenario."""


def _resources(info: ContainerInfo) -> dict[str, Any]:
    req = info.request
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if req.cpu_request_milli:
        requests["cpu"] = f"{req.cpu_request_milli}m"
    if req.cpu_limit_milli is not None:
        limits["cpu"] = f"{req.cpu_limit_milli}m"
    if req.memory_request is not None:
        requests["memory"] = req.memory_request
    if req.memory_limit is not None:
        limits["memory"] = req.memory_limit
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _placement(info: ContainerInfo, a: Assignment | None) -> tuple[str, str]:
    """The cpuset and memory nodes the container has on the node: ours, else the runtime's."""
    cpus = a.cpus if a is not None and a.cpus else info.current_cpus
    mems = a.mems if a is not None and a.mems else info.current_mems
    return (str(cpus) if cpus else "", str(mems) if mems else "")


def dump_scenario(
    topology: Topology,
    config: Config,
    containers: Sequence[tuple[ContainerInfo, Assignment | None]],
    *,
    description: str = "",
) -> dict[str, Any]:
    """The scenario of the live node (module docstring)."""
    pods: dict[str, dict[str, Any]] = {}
    namespaces: dict[str, str] = {}
    driver = "systemd"
    for info, a in containers:
        if info.kind is not ContainerKind.APP:
            continue
        p = info.pod
        if namespaces.setdefault(p.name, p.namespace) != p.namespace:
            raise DumpError(
                f"dump: pod {p.name} is in namespaces {namespaces[p.name]} and {p.namespace}; "
                "expected pod names unique on the node (a scenario names pods by name)"
            )
        if p.cgroup_parent and not p.cgroup_parent.endswith(".slice"):
            driver = "cgroupfs"
        entry = pods.setdefault(
            p.name,
            {
                "pod": p.name,
                "namespace": p.namespace,
                "qos": str(p.qos_class),
                "annotations": dict(p.annotations),
                "labels": dict(p.labels),
                "containers": [],
            },
        )
        cpus, mems = _placement(info, a)
        entry["containers"].append(
            {"name": info.name, **_resources(info), "cpus": cpus, "mems": mems}
        )
    return {
        "description": description or f"dump of a node ({len(pods)} pods)",
        "topology": to_record(topology),
        "policy": config.policy,
        "config": dict(config.policy_config),
        "control": config.control.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "cgroupDriver": driver,
        "steps": [{"synchronize": {"pods": list(pods.values())}}] if pods else [],
    }
