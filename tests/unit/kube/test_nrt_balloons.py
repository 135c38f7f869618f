"""The balloons policy's NodeResourceTopology zones, checked as nri-plugins'
n6-hbm-cxl/test04-nrt checks its own (balloons/n6-hbm-cxl/test04-nrt/code.var.sh): the
same configuration and pods, their zone and resource names, their expected values
(attributes matched as their regular expressions are, ``=~``; resources compared
exactly)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nri_resmgr.simulator.results import StepResult
from tests.parity.balloons.test_n6_hbm_cxl_test04_nrt import CONFIG
from tests.parity.machines import N6_HBM_CXL
from tests.unit.kube.test_nrt import run

PRESERVE = {
    "cpu.preserve.resource-policy.nri.io/container.pod0c1": "true",
    "memory.preserve.resource-policy.nri.io/container.pod0c2": "true",
}


def create(name: str, count: int, cpureq: str, cpulim: str | None, **extra: Any) -> dict[str, Any]:
    """Their balloons-busybox pod: `count` containers, 100M request, 500M limit."""
    limits: dict[str, str] = {"memory": "500M"}
    if cpulim:
        limits["cpu"] = cpulim
    return {"create": {"pod": name, **extra, "containers": [
        {"name": f"{name}c{i}", "requests": {"cpu": cpureq, "memory": "100M"},
         "limits": limits} for i in range(count)]}}  # fmt: skip


def zone(step: StepResult, name: str) -> Mapping[str, Any] | None:
    found = [z for z in step.nrt["zones"] if z["name"] == name]
    return found[0] if found else None


def attribute(step: StepResult, name: str, attr: str) -> str:
    z = zone(step, name)
    assert z is not None, name
    return "\n".join(a["value"] for a in z["attributes"] if a["name"] == attr)


def resource(step: StepResult, name: str, res: str, field: str) -> str:
    """jq's ``.resources[] | select(.name == res).field``: empty for a missing zone."""
    z = zone(step, name)
    if z is None:
        return ""
    return "\n".join(r[field] for r in z["resources"] if r["name"] == res)


def verify_attribute(step: StepResult, name: str, attr: str, pattern: str) -> None:
    value = attribute(step, name, attr)
    assert re.search(pattern, value), (name, attr, value, pattern)


def test_their_test04_nrt() -> None:
    result = run(
        [
            {"create": {"pod": "empty", "containers": []}},
            create("pod0", 3, "750m", None, annotations=PRESERVE),
            create("pod1", 2, "200m", "1500m"),
        ],
        policy="balloons",
        config=CONFIG,
        topology=N6_HBM_CXL,
    )
    start, pod0, pod1 = result.steps
    # zones when the fullsocket balloons hold no containers
    verify_attribute(start, "fullsocket[0]", "cpuset", "[4567]")
    verify_attribute(start, "fullsocket[0]", "shared cpuset", "5-7|4,6-7|4-5,7|4-6")
    verify_attribute(start, "fullsocket[0]", "excess cpus", "1")
    verify_attribute(start, "fullsocket[1]", "cpuset", "0|1")
    verify_attribute(start, "fullsocket[1]", "shared cpuset", "1-2|0,2")
    verify_attribute(start, "fullsocket[1]", "excess cpus", "1")
    verify_attribute(start, "reserved[0]", "cpuset", "3")
    verify_attribute(start, "reserved[0]", "shared cpuset", "^$")
    assert resource(start, "reserved[0]", "cpu", "capacity") == "8"
    assert resource(start, "reserved[0]", "cpu", "allocatable") == "6"
    assert resource(start, "fullsocket[0]", "cpu", "allocatable") == "4"
    assert resource(start, "fullsocket[0]", "cpu", "available") == "4"
    assert resource(start, "fullsocket[1]", "cpu", "allocatable") == "4"
    assert resource(start, "fullsocket[1]", "cpu", "available") == "4"
    # burstable containers without CPU limits
    assert resource(pod0, "default/pod0/pod0c0", "cpu", "capacity") == "4"
    assert resource(pod0, "default/pod0/pod0c0", "cpu", "allocatable") == "750m"
    assert resource(pod0, "default/pod0/pod0c0", "cpu", "available") == "0"
    verify_attribute(pod0, "default/pod0/pod0c0", "cpuset", "4-7")
    verify_attribute(pod0, "default/pod0/pod0c0", "memory set", "1")
    assert resource(pod0, "default/pod0/pod0c1", "cpu", "capacity") == ""  # preserved
    assert resource(pod0, "default/pod0/pod0c2", "cpu", "capacity") == "4"
    assert resource(pod0, "default/pod0/pod0c2", "cpu", "allocatable") == "750m"
    verify_attribute(pod0, "default/pod0/pod0c2", "memory set", "^$")
    # burstable containers with CPU limits
    assert resource(pod1, "default/pod1/pod1c0", "cpu", "capacity") == "1500m"
    verify_attribute(pod1, "default/pod1/pod1c0", "cpuset", "0-2")


def test_a_balloons_available_is_what_its_containers_left() -> None:
    result = run([create("pod0", 2, "750m", None)], policy="balloons", config=CONFIG,
                 topology=N6_HBM_CXL)  # fmt: skip
    (step,) = result.steps
    holder = zone(step, "default/pod0/pod0c0")
    assert holder is not None
    balloon = holder["parent"]
    # inflated up to its maxCPUs (4; the CPUs in no balloon would allow more), less 1500m
    assert attribute(step, balloon, "excess cpus") == "500m"
    assert resource(step, balloon, "cpu", "available") == "2500m"
