"""A picture of the node after every step of a scenario (`nri_resmgr.view`).

`run_views` runs a scenario as `run.run_scenario` does and, through its step observer,
draws each step's `NodeView` from the pipeline the step left: what `nri-resmgr show
--scenario` prints and `nri-resmgr simulate --html` writes.
"""

from __future__ import annotations

from typing import Any

from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.simulator.results import SimulationResult
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import Scenario
from nri_resmgr.topology.model import Topology
from nri_resmgr.view.model import NodeView, policy_view

__all__ = ["run_views", "step_title"]


def step_title(index: int, op: str, pod: str | None) -> str:
    """``step 3: create web``: how a picture names its step."""
    return f"step {index}: {op}" + (f" {pod}" if pod else "")


def run_views(scenario: Scenario, **options: Any) -> tuple[SimulationResult, list[NodeView]]:
    """Every step's result and picture; `options` are `run_scenario`'s."""
    views: list[NodeView] = []

    def observe(index: int, topology: Topology, pipeline: Pipeline) -> None:
        step = scenario.steps[index]
        pod = (
            step.create.pod
            if step.create is not None
            else step.delete.pod
            if step.delete is not None
            else step.update.pod
            if step.update is not None
            else None
        )
        views.append(
            policy_view(
                topology,
                policy=pipeline.policy,
                policy_name=pipeline.policy.name,
                state=pipeline.state,
                containers=pipeline.snapshot(),
                title=step_title(index, step.op, pod),
            )
        )

    result = run_scenario(scenario, observe=observe, **options)
    return result, views
