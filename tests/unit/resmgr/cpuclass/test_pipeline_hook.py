"""The pipeline hands the balloons policy's CPU classes to the controllers when they
change, keeps the decision when a controller fails, and calls `stopped` at close."""

from __future__ import annotations

from typing import Any

from nri_resmgr.model import ResmgrError
from nri_resmgr.policy.balloons import BalloonsPolicy
from nri_resmgr.policy.cpu_classes import CPUClassUse
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.runtime.pipeline import Controller, Pipeline
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import Scenario
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import machine
from tests.support.logs import QUIET
from tests.support.pipeline import container, sandbox

BALLOON = "balloon.balloons.resource-policy.nri.io"
CONFIG: dict[str, Any] = {
    "reservedResources": {"cpu": "1"},
    "idleCPUClass": "idle",
    "balloonTypes": [{"name": "fast-bln", "cpuClass": "fast", "minCPUs": 2}],
    "cpuClasses": [{"name": "idle", "maxFreq": "base"}, {"name": "fast", "maxFreq": "turbo"}],
}


class Recorder(Controller):
    name = "recorder"

    def __init__(self, fail: bool = False) -> None:
        self.uses: list[CPUClassUse] = []
        self.stops = 0
        self.fail = fail

    def cpu_classes_changed(self, use: CPUClassUse) -> None:
        self.uses.append(use)
        if self.fail:
            raise ResmgrError("cpu0/cpufreq/scaling_max_freq: not written")

    def stopped(self) -> None:
        self.stops += 1


def test_class_use_goes_to_controllers_when_it_changes() -> None:
    rec = Recorder()
    p = Pipeline(BalloonsPolicy(topology=machine(), config=CONFIG), controllers=[rec], log=QUIET)
    pod = sandbox("p0", annotations={BALLOON: "fast-bln"})
    p.create(pod, container(pod, "a", cpu="1", limit="1"))
    (use,) = rec.uses
    assert len(use.cpus["fast"]) == 2
    assert use.cpus["idle"] == use.managed - use.cpus["fast"] - IDSet([0])
    assert [c.name for c in use.classes] == ["idle", "fast"]
    # a second container fits the balloon as it is: the classes did not change
    p.create(pod, container(pod, "b", cpu="500m", limit="500m"))
    assert len(rec.uses) == 1
    # a third one inflates it: they did
    p.create(pod, container(pod, "c", cpu="1", limit="1"))
    assert len(rec.uses) == 2
    assert len(rec.uses[1].cpus["fast"]) == 3
    p.close()
    assert rec.stops == 1


def test_a_failing_controller_does_not_undo_the_decision() -> None:
    rec = Recorder(fail=True)
    p = Pipeline(BalloonsPolicy(topology=machine(), config=CONFIG), controllers=[rec], log=QUIET)
    pod = sandbox("p0", annotations={BALLOON: "fast-bln"})
    adjust, _ = p.create(pod, container(pod, "a"))
    assert adjust.linux.resources.cpu.cpus
    assert "p0-a" in p.assignments
    assert rec.uses


def test_default_class_for_unnamed_cpus() -> None:
    conf = {
        "reservedResources": {"cpu": "1"},
        "cpuClasses": [{"name": "default", "maxFreq": "base"}],
    }
    policy = BalloonsPolicy(topology=machine(), config=conf)
    use = policy.cpu_class_use(policy.initial_state())
    assert use.cpus == {"default": use.managed}  # the reserved and the idle CPUs
    # without a class named default, unnamed CPUs are in no class
    policy = BalloonsPolicy(topology=machine(), config={"reservedResources": {"cpu": "1"}})
    assert policy.cpu_class_use(policy.initial_state()).cpus == {}


def test_a_policy_without_classes_hands_none_over_once() -> None:
    rec = Recorder()
    p = Pipeline(StaticPolicy(topology=machine(), config={}), controllers=[rec], log=QUIET)
    pod = sandbox("p0")
    p.create(pod, container(pod, "a"))
    p.create(pod, container(pod, "b"))
    assert rec.uses == [CPUClassUse()]  # what was set before a reconfiguration goes back


FAST_POD = {
    "pod": "p0",
    "annotations": {BALLOON: "fast-bln"},
    "containers": [{"name": "c", "requests": {"cpu": "1"}, "limits": {"cpu": "1"}}],
}


def test_simulator_steps_name_each_class_cpus() -> None:
    scenario = Scenario.model_validate(
        {
            "topology": {"packages": 1, "cores": 4, "threads": 1},
            "policy": "balloons",
            "config": {
                "reservedResources": {"cpu": "1"},
                "idleCPUClass": "idle",
                "balloonTypes": [{"name": "fast-bln", "cpuClass": "fast"}],
                "cpuClasses": [{"name": "idle"}, {"name": "fast"}],
            },
            "steps": [{"create": FAST_POD}],
        }
    )
    step = run_scenario(scenario, log=QUIET).steps[0]
    assert step.as_dict()["cpu_classes"] == {"fast": "1", "idle": "2-3"}
