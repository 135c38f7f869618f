"""n4c16/test07-maxballoons: ``maxBalloons`` bounds instances; contradicting bounds refused."""

from __future__ import annotations

import pytest

from nri_resmgr.model import ConfigError
from tests.parity.balloons._sim import BALLOON, Script, config, disjoint, simulate

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

    p = run.at(pod0)
    assert len(p.cpus("pod0c0")) == 2
    p = run.at(pod1)
    assert p.cpus("pod0c0") == p.cpus("pod1c0")
    # the singleton balloon is full and may not have a second instance
    p = run.at(full, errors=True)
    assert p.step.errors and all("pod2/pod2c0" in e for e in p.step.errors), p.step.errors
    assert p.live("pod2c") == []
    p = run.at(pod2)
    assert len(p.cpus("pod2c0")) == 1
    p = run.at(pod3)
    assert disjoint(p.cpus("pod2c0"), p.cpus("pod3c0"))
    p = run.at(pod4)  # no third instance, but it fits in the second
    assert p.cpus("pod4c0") == p.cpus("pod3c0")
    p = run.at(none_left, errors=True)
    assert p.step.errors and all("pod5/pod5c0" in e for e in p.step.errors), p.step.errors
    assert p.live("pod5c") == []


def test_maxballoons_impossible() -> None:
    # their policy refuses to start; ours refuses the configuration, naming the type
    with pytest.raises(ConfigError, match="impossible"):
        simulate(Script(), IMPOSSIBLE)
