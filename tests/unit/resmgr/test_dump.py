"""The live node as a scenario (`simulator.dump`) and the synchronize step that replays it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import Assignment, ContainerID, CPUKind
from nri_resmgr.simulator.dump import DumpError, dump_scenario
from nri_resmgr.simulator.run import quiet_log, run_scenario
from nri_resmgr.simulator.scenario import MAX_CONTAINERS, ScenarioError, load_scenario
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from tests.unit.resmgr.view.support import container_info

TOPO = load_topology("packages=1,cores=4,threads=2")


def test_two_pods_of_one_name_cannot_be_a_scenario() -> None:
    a = container_info("a", pod="web", namespace="one")
    b = container_info("b", pod="web", namespace="two")
    with pytest.raises(DumpError, match="pod web is in namespaces one and two"):
        dump_scenario(TOPO, config_from_mapping({}), [(a, None), (b, None)])


def test_a_container_the_policy_leaves_alone_keeps_the_runtimes_cpuset() -> None:
    info = container_info("x", pod="p")
    info = replace(info, current_cpus=IDSet({2, 3}), current_mems=IDSet({0}))
    untouched = Assignment(ContainerID("x"), IDSet(), IDSet(), CPUKind.NONE)
    doc = dump_scenario(TOPO, config_from_mapping({"policy": "none"}), [(info, untouched)])
    (pod,) = doc["steps"][0]["synchronize"]["pods"]
    assert pod["containers"] == [{"name": "x", "cpus": "2-3", "mems": "0"}]
    result = run_scenario(load_scenario(doc), log=quiet_log())
    assert result.steps[0].moved == {} and result.steps[0].errors == ()


def sync(pods: list[dict[str, Any]]) -> dict[str, Any]:
    return {"topology": "packages=1,cores=4,threads=2", "steps": [{"synchronize": {"pods": pods}}]}


def test_synchronize_moves_an_invalid_placement_and_says_so() -> None:
    guaranteed = {
        "requests": {"cpu": "1", "memory": "10M"},
        "limits": {"cpu": "1", "memory": "10M"},
    }
    doc = sync(
        [
            {"pod": "a", "containers": [{"name": "c", **guaranteed, "cpus": "3", "mems": "0"}]},
            {"pod": "b", "containers": [{"name": "c", **guaranteed, "cpus": "3", "mems": "0"}]},
        ]
    )
    (step,) = run_scenario(load_scenario(doc), log=quiet_log()).steps
    # CPU 3 cannot be exclusive to both: one keeps it, the other moves, and is listed
    assert len(step.moved) == 1
    (moved,) = step.moved
    assert step.moved[moved] == f"cpus 3 -> {step.containers[moved].cpus}"
    assert step.containers[moved].cpus != "3"


def test_synchronize_of_a_pod_already_there_is_refused() -> None:
    doc = sync([{"pod": "a"}])
    doc["steps"] = [{"create": {"pod": "a"}}, *doc["steps"]]
    with pytest.raises(ScenarioError, match="synchronize: pod 'a' exists already"):
        run_scenario(load_scenario(doc), log=quiet_log())


def test_synchronized_containers_count_against_the_bound() -> None:
    many = [{"name": f"c{i}"} for i in range(MAX_CONTAINERS + 1)]
    with pytest.raises(ScenarioError, match=f"expected at most {MAX_CONTAINERS} containers"):
        load_scenario(sync([{"pod": "a", "containers": many}]))
