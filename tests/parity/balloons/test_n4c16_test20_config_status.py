"""n4c16/test20-config-status, its policy half: a valid configuration is taken, one with
``minCPUs`` above ``maxCPUs`` is refused with an error naming the key.

Their test reads the verdict from the node status the agent writes back to the
``BalloonsPolicy`` custom resource (Success, then Failure); writing that status is the
custom-resource daemon's, tested with it.
"""

from __future__ import annotations

import pytest

from nri_resmgr.model import ConfigError
from tests.parity.balloons._sim import Script, config, simulate

GOOD = config("""
reservedResources:
  cpu: 750m
allocatorTopologyBalancing: true
balloonTypes:
  - name: dynamic
    maxCPUs: 32
    maxBalloons: 8
    preferNewBalloons: true
    shareIdleCPUsInSame: numa
""")
BROKEN = {**GOOD, "balloonTypes": [{**GOOD["balloonTypes"][0], "minCPUs": 33}]}


def test_config_status_success() -> None:
    s = Script()
    step = s.create()
    assert len(simulate(s, GOOD).at(step).cpus("pod0c0")) >= 1


def test_config_status_failure() -> None:
    with pytest.raises(ConfigError, match="minCPUs") as err:
        simulate(Script(), BROKEN)
    assert "dynamic" in str(err.value)
