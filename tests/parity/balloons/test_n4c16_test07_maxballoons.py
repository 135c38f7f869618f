"""n4c16/test07-maxballoons: ``maxBalloons`` bounds instances; contradicting bounds refused."""

from __future__ import annotations

import re

import pytest

from nri_resmgr.model import ConfigError
from tests.parity.balloons._sim import BALLOON, Script, config, simulate
from tests.parity.ports import port

CONFIG = config("""
reservedResources:
  cpu: "1"
pinCPU: true
pinMemory: true
balloonTypes:
  - name: singleton
    minCPUs: 2
    maxCPUs: 2
    minBalloons: 1
    maxBalloons: 1
  - name: dynamictwo
    maxCPUs: 1
    maxBalloons: 2
    preferNewBalloons: true
""")
IMPOSSIBLE = config("""
reservedResources:
  cpu: "1"
pinCPU: true
pinMemory: true
balloonTypes:
  - name: singleton
    minCPUs: 2
    maxCPUs: 2
    minBalloons: 1
    maxBalloons: 1
  - name: impossible
    minBalloons: 2
    maxBalloons: 1
""")


@port("balloons/n4c16/test07-maxballoons")
def test_maxballoons() -> None:
    s = Script()
    singleton = {BALLOON: "singleton"}
    two = {BALLOON: "dynamictwo"}
    # their script sets only CPUREQ and CPULIM: MEMREQ and MEMLIM keep run.sh's defaults
    pod0 = s.create(cpureq="1500m", cpulim="1500m", annotations=singleton)
    pod1 = s.create(cpureq="500m", cpulim="500m", annotations=singleton)
    full = s.create(cpureq="100m", cpulim="100m", annotations=singleton)
    s.delete("pod2")
    s.pods -= 1  # their failing create ran in a subshell: the next pod is pod2 again
    pod2 = s.create(cpureq="800m", cpulim="800m", annotations=two)
    pod3 = s.create(cpureq="600m", cpulim="600m", annotations=two)
    pod4 = s.create(cpureq="300m", cpulim="300m", annotations=two)
    none_left = s.create(cpureq="300m", cpulim="300m", annotations=two)
    run = simulate(s, CONFIG)

    run.verify(pod0, 'len(cpus["pod0c0"]) == 2')
    run.verify(pod1, 'cpus["pod0c0"] == cpus["pod1c0"]')
    # the singleton balloon is full and may not have a second instance; their check
    # greps the pod's events for "no suitable balloon instance available", ours says why
    # (differs by design: the container, the type, and each limit that refused it)
    refused = run.result.steps[full].errors
    assert len(refused) == 1 and re.fullmatch(
        r"pod2/pod2c0: pod default/pod2 container pod2c0: no singleton balloon can take "
        r"100m CPU: singleton\[0\] would need 3 CPUs; maxCPUs is 2; "
        r"no new singleton balloon: maxBalloons 1 reached",
        refused[0],
    ), refused
    assert "pod2c0" not in run.allowed(full).cpus
    run.verify(pod2, 'len(cpus["pod2c0"]) == 1')
    run.verify(pod3, 'disjoint_sets(cpus["pod2c0"], cpus["pod3c0"])')
    run.verify(pod4, 'cpus["pod4c0"] == cpus["pod3c0"]')  # no third instance; fits the second
    refused = run.result.steps[none_left].errors
    assert len(refused) == 1 and re.fullmatch(
        r"pod5/pod5c0: pod default/pod5 container pod5c0: no dynamictwo balloon can take "
        r"300m CPU: no new dynamictwo balloon: maxBalloons 2 reached; "
        r"dynamictwo\[0\] would need 2 CPUs; maxCPUs is 1; "
        r"dynamictwo\[1\] would need 2 CPUs; maxCPUs is 1",
        refused[0],
    ), refused
    assert "pod5c0" not in run.allowed(none_left).cpus


def test_maxballoons_impossible() -> None:
    # their policy refuses to start; ours refuses the configuration, naming the type
    with pytest.raises(ConfigError, match="impossible"):
        simulate(Script(), IMPOSSIBLE)
