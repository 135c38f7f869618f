"""`explain` over a scenario: the decision for one container, as the simulator took it.

`explain_in_scenario(scenario, "POD[/CONTAINER]", step=N)` runs the scenario up to step N
(default: the last), keeping the policy state after every step; it finds the step that
created the pod (the last at or before N), rebuilds the state just before the container's
creation (the state before that step, plus the pod's earlier app containers allocated as
the pipeline did) and explains the decision in it (`view.explain`).  A container that was
refused is not live afterwards: its step's error is the policy's refusal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nri_resmgr.model import ContainerInfo, PolicyState, ResmgrError
from nri_resmgr.policy.base import Policy
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import Scenario, ScenarioError
from nri_resmgr.topology.model import Topology
from nri_resmgr.view.explain import Explanation, explain

__all__ = ["explain_in_scenario"]


@dataclass(frozen=True, slots=True)
class _After:
    """What a step left: the policy state and the live containers by pod/name."""

    policy: Policy
    state: PolicyState
    containers: dict[tuple[str, str], ContainerInfo]
    names: dict[str, str]


def explain_in_scenario(
    scenario: Scenario, target: str, *, step: int | None = None, **options: Any
) -> Explanation | str:
    """The explanation of `target` (``POD`` or ``POD/CONTAINER``), or the refusal message
    of its step when it was refused; `options` are `run_scenario`'s."""
    pod, _, name = target.partition("/")
    last = len(scenario.steps) - 1 if step is None else step
    if not 0 <= last < len(scenario.steps):
        raise ScenarioError(f"--step: expected a step 0-{len(scenario.steps) - 1}, found {step}")
    created = [
        i
        for i, s in enumerate(scenario.steps[: last + 1])
        if s.create is not None and s.create.pod == pod
    ]
    if not created:
        raise ScenarioError(f"explain: no step up to {last} creates pod {pod!r}")
    k = created[-1]
    spec = scenario.steps[k].create
    assert spec is not None
    order = [c.name for c in spec.containers]
    if not name:
        name = order[0] if order else ""
    if name not in order:
        raise ScenarioError(
            f"explain: pod {pod!r} has no app container {name!r}; expected one of {order}"
        )
    after: list[_After] = []

    def observe(_index: int, _topology: Topology, p: Pipeline) -> None:
        infos = {(i.pod.name, i.name): i for i in p.containers.values()}
        names = {str(i.id): f"{i.pod.name}/{i.name}" for i in p.containers.values()}
        after.append(_After(p.policy, p.state, infos, names))

    steps = scenario.model_copy(update={"steps": scenario.steps[: k + 1]})
    result = run_scenario(steps, observe=observe, **options)
    now = after[k]
    info = now.containers.get((pod, name))
    if info is None:
        errors = [e for e in result.steps[k].errors if e.startswith(f"{pod}/{name}:")]
        return errors[0] if errors else f"{pod}/{name} is not live after step {k}"
    state = after[k - 1].state if k else now.policy.initial_state()
    for earlier in order[: order.index(name)]:
        prev = now.containers.get((pod, earlier))
        if prev is None:
            continue
        try:
            state = now.policy.allocate(state, prev).state
        except ResmgrError:
            continue
    return explain(now.policy, state, info, names=now.names)
