"""The memory components: a container's NUMA memory policy and its memory QoS values.

Theory of operation
-------------------
Two `Controller`s, built from the ``control.memoryPolicy`` and ``control.memoryQos``
sections by `nri_resmgr.control.wiring.memory_control` (called where the pipeline is
assembled, `nri_resmgr.runtime.assembly`; this module is loaded only when a section is
given or ``control.sgxEpc`` is on), each add to a new container's creation adjustment:

* `MemoryPolicyControl` decides the container's policy (`mempolicy.policy_for`) from
  the placement the policy just decided (its CPUs and memory nodes; the machine's when
  the policy does not pin) and sends it as NRI's ``LinuxMemoryPolicy``.  It needs NRI
  v0.12.0 (`nri_requirements`): the daemon refuses an older runtime at Configure, which
  would drop the field silently.  The policy is set once, at creation (``set_mempolicy``
  in the container's init); when the container is moved later the kernel rebinds it to
  the new cpuset.mems (or keeps the given nodes with ``MPOL_F_STATIC_NODES``);
* `MemoryQoSControl` decides the container's unified (cgroup v2) values
  (`memqos.qos_for`) and sends them as ``LinuxResources.unified``, which every NRI
  release carries.  On a cgroup v1 host (no ``cgroup.controllers`` at the cgroup root),
  where runc refuses unified keys, it says so once when built and again for every
  container given values; the runtime's refusal then fails that container, and its
  error reaches the kubelet.  With ``control.sgxEpc.enable`` it also sets ``misc.max``
  from the SGX EPC limit annotation (`sgxepc.epc_limit`).

Each decision is one structured log line (``memory policy``, ``memory qos``).  A bad
annotation fails the container's creation with an `AnnotationError` naming it; a
section left out builds no controller, and the annotations are then not read at all (a
user may still run nri-plugins' own plugin for them).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nri_api import api
from nri_resmgr.control.hooks import Controller, RuntimeField
from nri_resmgr.control.memory_config import MemoryPolicyConfig, MemoryQoSConfig
from nri_resmgr.control.mempolicy import check_classes, policy_for
from nri_resmgr.control.memqos import MemoryQoS, qos_for
from nri_resmgr.control.sgxepc import epc_limit
from nri_resmgr.model import Assignment, ContainerInfo
from nri_resmgr.ops.logs import EventLog
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology

__all__ = [
    "LINUX_MEMORY_POLICY_SINCE",
    "MemoryPolicyControl",
    "MemoryQoSControl",
    "cgroup_v2",
]

#: the first NRI release with the LinuxMemoryPolicy adjustment
LINUX_MEMORY_POLICY_SINCE = (0, 12, 0)


def cgroup_v2(root: Path) -> bool:
    """Whether the cgroup hierarchy at `root` is cgroup v2 only (runc's unified mode)."""
    return (root / "cgroup.controllers").is_file()


class MemoryPolicyControl(Controller):
    """`Controller` adding a container's memory policy to its creation adjustment."""

    name = "memory-policy"

    def __init__(self, config: MemoryPolicyConfig, topology: Topology, log: EventLog) -> None:
        check_classes(config, topology)
        self.config = config
        self.topology = topology
        self.log = log
        if config.inject_mpolset:
            log.warning(
                "control.memoryPolicy.injectMpolset: true: no mpolset helper is injected here; "
                "the policy goes to the runtime as NRI's LinuxMemoryPolicy, which needs NRI "
                "v0.12+ and runc 1.4+ (an older runc ignores it)",
            )

    def nri_requirements(self) -> Sequence[RuntimeField]:
        return (
            RuntimeField("LinuxMemoryPolicy", LINUX_MEMORY_POLICY_SINCE, "control.memoryPolicy"),
        )

    def adjustment(
        self, container: ContainerInfo, assignment: Assignment
    ) -> api.ContainerAdjustment | None:
        topo = self.topology
        cpus = assignment.cpus or container.current_cpus or topo.online_cpus()
        mems = assignment.mems or container.current_mems or IDSet(topo.nodes)
        policy = policy_for(container, self.config, topology=topo, cpus=cpus, mems=mems)
        if policy is None:
            return None
        self.log.info(
            "memory policy",
            container=container.pretty,
            mode=str(policy.mode),
            nodes=str(policy.nodes),
            flags=",".join(policy.flags),
            spec=policy.nodes_spec,
            source=policy.source,
        )
        adjust = api.ContainerAdjustment()
        # CopyFrom marks the field present: MPOL_DEFAULT without nodes is all zero values
        adjust.linux.memory_policy.CopyFrom(
            api.LinuxMemoryPolicy(
                mode=str(policy.mode), nodes=str(policy.nodes), flags=[str(f) for f in policy.flags]
            )
        )
        return adjust


class MemoryQoSControl(Controller):
    """`Controller` adding a container's memory QoS values to its creation adjustment."""

    name = "memory-qos"

    def __init__(
        self,
        config: MemoryQoSConfig | None,
        *,
        cgroup_root: Path,
        log: EventLog,
        sgx_epc: bool = False,
    ) -> None:
        self.config = config
        #: also the SGX EPC limit annotation (`sgxepc`), as a ``misc.max`` value
        self.sgx_epc = sgx_epc
        self.log = log
        self.cgroup_root = cgroup_root
        self.v2 = cgroup_v2(cgroup_root)
        if not self.v2:
            log.warning(
                "memory QoS or SGX EPC limits configured on a cgroup v1 host: runc refuses "
                "the cgroup v2 (unified) values they set, so every container given such "
                "values will fail to start; run the node on cgroup v2 or remove "
                "control.memoryQos and control.sgxEpc",
                cgroup_root=str(cgroup_root),
            )

    def adjustment(
        self, container: ContainerInfo, assignment: Assignment
    ) -> api.ContainerAdjustment | None:
        qos = qos_for(container, self.config) if self.config is not None else MemoryQoS({})
        if self.sgx_epc:
            limit = epc_limit(container)
            if limit is not None:
                qos = MemoryQoS({**qos.unified, "misc.max": f"sgx_epc {limit}"}, qos.qos_class)
        if not qos.unified:
            return None
        values = ",".join(f"{k}={v}" for k, v in sorted(qos.unified.items()))
        if not self.v2:
            self.log.warning(
                "memory qos on a cgroup v1 host: the runtime will refuse these cgroup v2 "
                "values and fail the container",
                container=container.pretty,
                unified=values,
                qos_class=qos.qos_class or "",
                cgroup_root=str(self.cgroup_root),
            )
        else:
            self.log.info(
                "memory qos",
                container=container.pretty,
                unified=values,
                qos_class=qos.qos_class or "",
            )
        adjust = api.ContainerAdjustment()
        unified = adjust.linux.resources.unified
        for key, value in qos.unified.items():
            unified[key] = value
        return adjust
