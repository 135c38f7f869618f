"""Assembling a pipeline from a configuration: the policy, the controllers, the hints.

Theory of operation
-------------------
`build_pipeline` is the one place a `Config` becomes a running `Pipeline`: the policy
named by the configuration (or the ``--policy`` override) is loaded through the policy
registry, the controllers and the class selector are built from its ``control``
section (`nri_resmgr.control.wiring`), the memory policy and memory QoS components
from the same section (`nri_resmgr.control.memory`, loaded only when configured), an
interrupt controller is added for a policy that wishes interrupt affinities, and a new
container's devices and mounts are resolved to topology hints from the sysfs under
`sysfs_root`.  The daemon builds its pipeline
here at start, at Configure and at every live reconfiguration; the benchmarks and the
annotation fuzzer build theirs the same way, so they measure and test what runs.
With a state directory, the pipeline keeps its placement records there
(`nri_resmgr.runtime.record_store`), scoped to the policy, its configuration and the
machine (`record_scope`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nri_resmgr.config import Config
from nri_resmgr.control.cpuclass.files import CPUClassFiles
from nri_resmgr.control.irq import IrqFiles
from nri_resmgr.control.wiring import class_control_from_config, irq_control, memory_control
from nri_resmgr.model import DeviceRef, MountRef, TopologyHint
from nri_resmgr.ops.logs import get_logger
from nri_resmgr.policy_registry import load_policy
from nri_resmgr.runtime.pipeline import DecisionHook, HintResolver, Pipeline
from nri_resmgr.runtime.record_store import RECORD_FILE, Defer, RecordStore
from nri_resmgr.topology.devices import topology_hints
from nri_resmgr.topology.model import Topology

__all__ = [
    "DEFAULT_CGROUP_ROOT",
    "DEFAULT_RESCTRL_ROOT",
    "DEFAULT_STATE_DIR",
    "build_pipeline",
]

DEFAULT_RESCTRL_ROOT = "/sys/fs/resctrl"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
DEFAULT_STATE_DIR = "/var/lib/nri-resmgr"


def build_pipeline(
    config: Config,
    *,
    topology: Topology,
    policy: str | None = None,
    resctrl_root: str | None = None,
    cgroup_root: str | None = None,
    state_dir: str | None = None,
    runtime_rdt: Callable[[], bool] | None = None,
    sysfs_root: str | None = None,
    irq_files: IrqFiles | None = None,
    cpu_class_files: CPUClassFiles | None = None,
    on_decision: DecisionHook | None = None,
    defer_records: Defer | None = None,
    defer_lines: Defer | None = None,
) -> Pipeline:
    """A fresh pipeline for `config` (`policy` overrides ``config.policy``).

    With `sysfs_root`, a new container's devices and mounts are resolved to topology
    hints from the sysfs under it (`topology.devices`).

    RDT groups are managed under `resctrl_root` (default /sys/fs/resctrl when
    ``control.rdt.enable``), block I/O files under `cgroup_root` (default /sys/fs/cgroup
    when ``control.blockio.enable``).  `runtime_rdt` tells whether the connected runtime
    takes NRI's LinuxRdt adjustment (RDT monitoring, see `control.wiring.RdtGroups`).
    Interrupt affinities are written through `irq_files` (the daemon's one instance,
    under its root's proc), when given; a claim on a denied interrupt is a `ConfigError`.
    The memory QoS component reads the cgroup version under `cgroup_root` (default
    /sys/fs/cgroup).  CPU classes are written through `cpu_class_files` (the daemon's
    one instance, under its sysfs root), when given.  `on_decision` is told of each
    create and update decision committed (the daemon's record of the last decision per
    container).  `defer_records` puts the records' writes off until the reply is sent
    (the daemon's event loop; `RecordStore`); without it they are written at each commit.
    `defer_lines` puts the decision lines off so (`DecisionLog`).
    """
    if resctrl_root is None and config.control.rdt.enable:
        resctrl_root = DEFAULT_RESCTRL_ROOT
    if (
        cgroup_root is None
        and config.control.blockio.enable
        and not config.control.blockio.runtime_classes
    ):
        cgroup_root = DEFAULT_CGROUP_ROOT
    pol = load_policy(
        policy or config.policy,
        topology=topology,
        config=config.policy_config,
        plugin_dirs=config.policy_dirs,
    )
    controllers, selector = class_control_from_config(
        config.control,
        resctrl_root=resctrl_root,
        cgroup_root=cgroup_root,
        state_dir=state_dir or DEFAULT_STATE_DIR,
        runtime_rdt=runtime_rdt,
        cpu_class_files=cpu_class_files,
    )
    controllers += memory_control(
        config.control, topology=topology, cgroup_root=Path(cgroup_root or DEFAULT_CGROUP_ROOT)
    )
    controllers += irq_control(pol, irq_files)
    records = (
        RecordStore(
            Path(state_dir) / RECORD_FILE,
            scope=record_scope(pol.name, config.policy_config, topology),
            log=get_logger("records"),
            defer=defer_records,
        )
        if state_dir is not None
        else None
    )
    return Pipeline(
        pol,
        controllers=controllers,
        select_classes=selector,
        limits=config.limits,
        resolve_hints=_hint_resolver(sysfs_root) if sysfs_root is not None else None,
        on_decision=on_decision,  # issue 27 hook
        record_store=records,
        defer_lines=defer_lines,
    )


def record_scope(policy: str, policy_config: Mapping[str, Any], topology: Topology) -> str:
    """Whose placement records these are: the policy, a digest of its configuration and
    of the machine's CPUs and memory nodes.  Records of another scope are not read (a
    pool index or a balloon name means something else there)."""
    doc = {
        "config": policy_config,
        "cpus": str(topology.online_cpus()),
        "nodes": sorted(topology.nodes),
    }
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    return f"{policy}/{digest[:16]}"


def _hint_resolver(root: str) -> HintResolver:
    base = Path(root)  # once, not at every creation

    def resolve(
        devices: tuple[DeviceRef, ...], mounts: tuple[MountRef, ...]
    ) -> tuple[TopologyHint, ...]:
        return topology_hints(base, devices=devices, mounts=mounts)

    return resolve
