"""Putting it together: a scenario's topology, policy and controllers, and every step run."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nri_resmgr.config import (
    Config,
    config_from_mapping,
    policy_config_problems,
)
from nri_resmgr.control.irq import IrqFiles
from nri_resmgr.model import ConfigError
from nri_resmgr.ops.logs import log_config_warnings
from nri_resmgr.policy.base import Policy
from nri_resmgr.policy_registry import load_policy
from nri_resmgr.runtime.pipeline import ClassSelector, Controller, Pipeline
from nri_resmgr.simulator.kubelet import Simulator
from nri_resmgr.simulator.results import SimulationResult
from nri_resmgr.simulator.scenario import Scenario, ScenarioError
from nri_resmgr.topology.load import load_topology, path_kind
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.render import summarize

#: called after every step with its index, the machine and the pipeline as the step
#: left it (read only): `nri_resmgr.view` draws each step's picture from it
StepObserver = Callable[[int, Topology, Pipeline], None]


def quiet_log() -> Any:
    """A pipeline logger that drops every line (when the result is the output)."""
    import structlog

    def drop(_logger: Any, _method: str, _event: Any) -> Any:
        raise structlog.DropEvent

    return structlog.wrap_logger(structlog.PrintLogger(), processors=[drop])


# ---- putting it together --------------------------------------------------------------


def _resolve_topology(scenario: Scenario, override: str | None) -> Topology:
    source: str | dict[str, Any] | None = override if override is not None else scenario.topology
    if source is None:
        raise ScenarioError(
            "scenario: expected a topology (in the scenario or with --topology), found none"
        )
    if isinstance(source, str) and override is None and scenario.base_dir:
        candidate = Path(scenario.base_dir) / source
        if path_kind(candidate) is not None:
            source = str(candidate)
    return load_topology(source)


def _class_control(
    config: Config,
    *,
    resctrl_root: str | None,
    cgroup_root: str | None,
    state_dir: str,
    sysfs_root: str | None,
) -> tuple[list[Controller], ClassSelector | None]:
    """Controllers and class selection from the ``control`` section (CPU class files
    under `sysfs_root` when given)."""
    from nri_resmgr.control.cpuclass.files import CPUClassFiles
    from nri_resmgr.control.wiring import class_control_from_config

    return class_control_from_config(
        config.control,
        resctrl_root=resctrl_root,
        cgroup_root=cgroup_root,
        state_dir=state_dir,
        cpu_class_files=CPUClassFiles(sysfs_root) if sysfs_root is not None else None,
    )


def run_scenario(
    scenario: Scenario,
    *,
    topology: str | None = None,
    policy: str | None = None,
    config: Config | None = None,
    resctrl_root: str | None = None,
    cgroup_root: str | None = None,
    sysfs_root: str | None = None,
    log: Any = None,
    proc_root: str | None = None,
    observe: StepObserver | None = None,
) -> SimulationResult:
    """Run every step of `scenario`; later steps run even when earlier ones had errors.

    `topology`, `policy` and `config` (a daemon `Config`) override the scenario's own.
    With `proc_root` (a procfs mount point, e.g. `control.irq.write_synthetic_proc`'s) the
    policy's interrupt wishes are written there and every step reports the interrupts'
    affinities; a claim on a denied interrupt is a `ConfigError`.
    With `sysfs_root` the CPU class files under it are written as the daemon would
    (`control.cpuclass`); the step results name each class's CPUs either way.
    `observe` is called after every step (`StepObserver`).
    """
    from nri_resmgr.control.wiring import irq_control

    topo = _resolve_topology(scenario, topology)
    if config is None:
        doc: dict[str, Any] = {"policyConfig": scenario.config, "control": scenario.control}
        if scenario.policy:
            doc["policy"] = scenario.policy
        config = config_from_mapping(doc, source="scenario")
        log_config_warnings(config.warnings, source="scenario")
    name = policy or config.policy
    if policy is None and scenario.policy and "policy" not in config.model_fields_set:
        name = scenario.policy
    try:
        pol = load_policy(
            name, topology=topo, config=config.policy_config, plugin_dirs=config.policy_dirs
        )
    except ConfigError as exc:
        lines, _ = policy_config_problems(exc)
        raise ConfigError("; ".join(lines)) from exc
    with tempfile.TemporaryDirectory(prefix="nri-resmgr-sim-") as state_dir:
        controllers, selector = _class_control(
            config,
            resctrl_root=resctrl_root,
            cgroup_root=cgroup_root,
            state_dir=state_dir,
            sysfs_root=sysfs_root,
        )
        irq_files = IrqFiles(proc_root) if proc_root is not None else None
        controllers += irq_control(pol, irq_files)
        return _simulate(
            scenario,
            topology=topo,
            policy=pol,
            name=name,
            controllers=controllers,
            selector=selector,
            cgroup_root=cgroup_root,
            log=log,
            irq_files=irq_files,
            observe=observe,
        )


def _simulate(
    scenario: Scenario,
    *,
    topology: Topology,
    policy: Policy,
    name: str,
    controllers: Sequence[Controller],
    selector: ClassSelector | None,
    cgroup_root: str | None,
    log: Any,
    irq_files: IrqFiles | None = None,
    observe: StepObserver | None = None,
) -> SimulationResult:
    if log is None:
        import structlog

        log = structlog.get_logger().bind(component="pipeline")
    sim = Simulator(
        policy=policy,
        cgroup_driver=scenario.cgroup_driver,
        controllers=controllers,
        select_classes=selector,
        cgroup_root=cgroup_root,
        log=log,
        irq_files=irq_files,
        topology=topology,
    )
    results = []
    for i, step in enumerate(scenario.steps):
        results.append(sim.run_step(i, step))
        if observe is not None:
            observe(i, topology, sim.pipeline)
    return SimulationResult(
        topology=topology.source or "",
        policy=name,
        steps=tuple(results),
        machine=summarize(topology),
    )
