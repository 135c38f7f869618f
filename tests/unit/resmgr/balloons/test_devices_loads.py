"""preferCloseToDevices, preferFarFromDevices and loadClasses/loads.

The machine (`support.machine`): 2 packages x 2 nodes x 4 cores x 2 threads, node N is
CPUs 4N-4N+3 and their threads 4N+16-4N+19; each core has an L2 of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.model import ConfigError
from nri_resmgr.policy.balloons import BALLOON_ANNOTATION
from nri_resmgr.policy.balloons.spec import NOT_IMPLEMENTED
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import bctr, machine, policy, run
from tests.support.builders import topo

NODE = "/sys/devices/system/node/node{}"
ANN = BALLOON_ANNOTATION + "/pod"


def _conf(*types: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"reservedResources": {"cpu": "1"}, "balloonTypes": list(types), **extra}


def _cpus(st: Any, balloon: str) -> IDSet:
    return IDSet(st.balloons[balloon].cpus)


def test_prefer_close_to_a_numa_node() -> None:
    p = policy(_conf({"name": "near", "minCPUs": 3, "minBalloons": 1,
                      "preferCloseToDevices": [NODE.format(2)]}))  # fmt: skip
    st = p.initial_state()
    assert machine().nodes_of(_cpus(st, "near[0]")) == IDSet([2])


def test_rebuild_makes_the_initial_balloons_close_to_their_device() -> None:
    p = policy(_conf({"name": "near", "minCPUs": 3, "minBalloons": 1,
                      "preferCloseToDevices": [NODE.format(2)]}))  # fmt: skip
    st = p.rebuild([]).state
    assert machine().nodes_of(_cpus(st, "near[0]")) == IDSet([2])


def test_prefer_close_to_a_cache() -> None:
    cache = "/sys/devices/system/cpu/cpu9/cache/index2"
    p = policy(_conf({"name": "l2", "minCPUs": 2, "minBalloons": 1,
                      "preferCloseToDevices": [cache]}))  # fmt: skip
    assert _cpus(p.initial_state(), "l2[0]") == IDSet([9, 25])


def test_prefer_far_from_a_device() -> None:
    # packing would fill node 0, next to the reserved CPU 0
    p = policy(_conf({"name": "far", "minCPUs": 2, "minBalloons": 1,
                      "preferFarFromDevices": [NODE.format(0)]}))  # fmt: skip
    assert 0 not in machine().nodes_of(_cpus(p.initial_state(), "far[0]"))


def test_other_types_avoid_a_device_one_type_prefers() -> None:
    p = policy(_conf({"name": "near", "preferCloseToDevices": [NODE.format(0)]},
                     {"name": "plain", "minCPUs": 2, "minBalloons": 1}))  # fmt: skip
    assert 0 not in machine().nodes_of(_cpus(p.initial_state(), "plain[0]"))


def test_devices_come_before_the_isolated_cpus() -> None:
    # nri-plugins appends the isolated CPUs after the configured devices: node 1 wins,
    # the isolated CPUs 0-1 (on node 0) would leave too few CPUs there and give way
    two_nodes = topo(packages=1, nodes=2, cores=4, threads=2, memory="2G", isolated="0-1")
    p = policy(_conf({"name": "both", "minCPUs": 2, "minBalloons": 1, "preferIsolCpus": True,
                      "preferCloseToDevices": [NODE.format(1)]}), two_nodes)  # fmt: skip
    cpus = _cpus(p.initial_state(), "both[0]")
    assert two_nodes.nodes_of(cpus) == IDSet([1]), cpus


def test_a_hint_with_too_few_free_cpus_gives_way() -> None:
    p = policy(_conf({"name": "near", "preferCloseToDevices": [NODE.format(2)]}))
    st = run(p, bctr("a", milli=12000, ann={ANN: "near"}))
    assert len(_cpus(st, "near[0]")) == 12


def test_deflating_keeps_the_cpus_close_to_the_device() -> None:
    p = policy(_conf({"name": "near", "preferCloseToDevices": [NODE.format(2)]}))
    big, small = (bctr(n, milli=m, ann={ANN: "near"}) for n, m in (("big", 6000), ("s", 4000)))
    st = run(p, big, small)
    assert len(_cpus(st, "near[0]")) == 10
    st = p.release(st, big.id).state
    assert machine().nodes_of(_cpus(st, "near[0]")) == IDSet([2])


def test_loads_keep_balloons_of_a_loaded_level_apart() -> None:
    conf = _conf(
        {"name": "l2", "loads": ["membw"], "preferNewBalloons": True, "preferSpreadingPods": True},
        loadClasses=[{"name": "membw", "level": "l2cache"}],
    )
    p = policy(conf)
    st = run(p, *(bctr(n, pod=n, milli=1000, ann={ANN: "l2"}) for n in ("a", "b", "c")))
    cores = [machine().cores_of(_cpus(st, f"l2[{i}]")) for i in range(3)]
    assert all(len(c) == 1 for c in cores)
    assert len({next(iter(c)) for c in cores}) == 3


def test_rebuild_keeps_the_initial_balloons_of_a_loaded_level_apart() -> None:
    conf = _conf(
        {"name": "l2", "loads": ["membw"], "minBalloons": 3, "minCPUs": 1},
        loadClasses=[{"name": "membw", "level": "l2cache"}],
    )
    p = policy(conf)
    for st in (p.initial_state(), p.rebuild([]).state):
        cores = [machine().cores_of(_cpus(st, f"l2[{i}]")) for i in range(3)]
        assert len({next(iter(c)) for c in cores}) == 3, cores


@pytest.mark.parametrize(("overloads", "cores"), [(True, 2), (False, 1)])
def test_overloads_level_in_balloon_spreads_the_balloon_itself(overloads: bool, cores: int) -> None:
    conf = _conf(
        {"name": "avx", "loads": ["avx"], "minCPUs": 2, "minBalloons": 1},
        loadClasses=[{"name": "avx", "level": "core", "overloadsLevelInBalloon": overloads}],
    )
    st = policy(conf).initial_state()
    assert len(machine().cores_of(_cpus(st, "avx[0]"))) == cores
    grown = run(policy(conf), bctr("a", milli=4000, ann={ANN: "avx"}))
    assert len(machine().cores_of(_cpus(grown, "avx[0]"))) == (4 if overloads else 2)


@pytest.mark.parametrize(
    ("conf", "words"),
    [
        (_conf({"name": "x", "preferCloseToDevices": [NODE.format(9)]}), ["node9", "x"]),
        (_conf({"name": "x", "preferFarFromDevices": ["/sys/bus/pci/devices/0000:99:00.0"]}),
         ["0000:99:00.0", "preferFarFromDevices"]),
        (_conf({"name": "x", "preferCloseToDevices": ["podresourceapi:tech.com/[*"]}),
         ["podresourceapi:tech.com/[*", "malformed"]),
        (_conf({"name": "x", "loads": ["nosuch"]}, loadClasses=[{"name": "a", "level": "core"}]),
         ["nosuch", "expected one of a"]),
        (_conf(loadClasses=[{"name": "a", "level": "core"}, {"name": "a", "level": "numa"}]),
         ["'a' more than once"]),
        (_conf({"name": "c1"}, {"name": "comp", "components": [{"balloonType": "c1"}],
                "preferCloseToDevices": [NODE.format(0)]}), ["composite", "comp"]),
    ],
    ids=["unknown-node", "unknown-pci", "podresourceapi", "undefined-load", "duplicate-class",
         "composite"],
)  # fmt: skip
def test_configuration_errors(conf: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        policy(conf)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_the_keys_are_no_longer_listed_as_not_implemented() -> None:
    for key in ("loadClasses", "balloonTypes.loads", "balloonTypes.preferCloseToDevices",
                "balloonTypes.preferFarFromDevices"):  # fmt: skip
        assert key not in NOT_IMPLEMENTED
