"""``preferCloseToDevices: podresourceapi:PATTERN``: a balloon that takes a container
keeps close to the devices the kubelet gave it (nri-plugins #720), matched by resource
name with Go's ``path.Match`` wildcards; other containers, patterns that match nothing
and devices without locality change nothing.

The machine (`support.machine`): 2 packages x 2 nodes x 4 cores x 2 threads, node N is
CPUs 4N-4N+3 and their threads 4N+16-4N+19.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nri_resmgr.model import ConfigError, ContainerInfo, HintSource, TopologyHint
from nri_resmgr.policy.balloons import BALLOON_ANNOTATION
from nri_resmgr.topology.cpuset import IDSet
from tests.support.balloons import bctr, machine, policy, run

ANN = BALLOON_ANNOTATION + "/pod"


def _conf(*close: str) -> dict[str, Any]:
    gpu = {
        "name": "gpu",
        "preferNewBalloons": True,
        "preferSpreadingPods": True,
        "preferCloseToDevices": list(close),
    }
    return {"reservedResources": {"cpu": "1"}, "balloonTypes": [gpu]}


def with_devices(c: ContainerInfo, **nodes: int) -> ContainerInfo:
    """`c` with kubelet devices: resource name (``_`` for ``/``) -> its NUMA node."""
    hints = tuple(
        TopologyHint(
            provider="podresourceapi:" + name.replace("__", "/").replace("_", "."),
            source=HintSource.POD_RESOURCES,
            nodes=IDSet([node]),
        )
        for name, node in nodes.items()
    )
    return replace(c, topology_hints=hints)


def nodes_of(st: Any, balloon: str) -> IDSet:
    return machine().nodes_of(IDSet(st.balloons[balloon].cpus))


@pytest.mark.parametrize(
    "pattern",
    ["podresourceapi:vendor.com/gpu", "podresourceapi:*.com/gpu", "podresourceapi:vendor.com/*"],
)
def test_a_balloon_goes_close_to_the_containers_kubelet_device(pattern: str) -> None:
    p = policy(_conf(pattern))
    a = with_devices(bctr("a", pod="a", milli=2000, ann={ANN: "gpu"}), vendor_com__gpu=3)
    b = with_devices(bctr("b", pod="b", milli=2000, ann={ANN: "gpu"}), vendor_com__gpu=2)
    st = run(p, a, b)
    assert nodes_of(st, "gpu[0]") == IDSet([3])
    assert nodes_of(st, "gpu[1]") == IDSet([2])


def test_no_match_or_no_device_places_as_without_the_option() -> None:
    plain = run(policy(_conf()), bctr("a", milli=2000, ann={ANN: "gpu"}))
    for c in (
        bctr("a", milli=2000, ann={ANN: "gpu"}),  # no kubelet devices
        with_devices(bctr("a", milli=2000, ann={ANN: "gpu"}), other_org__nic=3),
    ):
        st = run(policy(_conf("podresourceapi:vendor.com/*")), c)
        assert st.balloons["gpu[0]"].cpus == plain.balloons["gpu[0]"].cpus


def test_a_wildcard_does_not_cross_a_slash() -> None:
    st = run(
        policy(_conf("podresourceapi:*")),  # matches no "domain/name"
        with_devices(bctr("a", milli=2000, ann={ANN: "gpu"}), vendor_com__gpu=3),
    )
    assert nodes_of(st, "gpu[0]") != IDSet([3])


@pytest.mark.parametrize(
    ("conf", "words"),
    [
        (_conf("podresourceapi:[vendor"), ["podresourceapi:[vendor", "malformed or unclosed"]),
        (_conf("podresourceapi:"), ["'podresourceapi:'", "pattern is empty"]),
        (
            {
                "reservedResources": {"cpu": "1"},
                "balloonTypes": [{"name": "x", "preferFarFromDevices": ["podresourceapi:a/b"]}],
            },
            ["preferFarFromDevices has 'podresourceapi:a/b'", "preferCloseToDevices only"],
        ),
    ],
    ids=["bad-pattern", "empty", "far"],
)
def test_bad_entries_are_configuration_errors(conf: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        policy(conf)
    assert all(w in str(err.value) for w in words), str(err.value)
