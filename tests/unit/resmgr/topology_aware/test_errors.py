"""The topology-aware policy's errors: requests that cannot be placed, bad annotations and
configuration, each naming what was expected and what was found; shared pools never
emptied.  The machine is `small()` (tests.support.builders).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from nri_resmgr.model import (
    AllocationError,
    AnnotationError,
    ConfigError,
    ContainerInfo,
    CPUKind,
)
from nri_resmgr.policy.topology_aware import (
    TopologyAwarePolicy,
)
from nri_resmgr.policy.topology_aware.preferences import (
    MEMORY_TYPE,
    PREFER_SHARED,
)
from tests.support.builders import BE, ctr, small


@pytest.mark.parametrize(
    ("container", "error", "message"),
    [
        pytest.param(
            ctr("c", qos=BE, ann={MEMORY_TYPE: "dram,hbmx"}),
            AnnotationError,
            "pod default/p container c: annotation memory-type.resource-policy.nri.io has "
            'unknown type "hbmx"; expected one of dram, pmem, hbm, mixed',
            id="memory-type",
        ),
        pytest.param(
            ctr("c", milli=2000, ann={f"{PREFER_SHARED}/container.c": "maybe"}),
            AnnotationError,
            "pod default/p container c: annotation prefer-shared-cpus.resource-policy.nri.io "
            'has value "maybe"; expected true or false',
            id="bad-bool",
        ),
        pytest.param(
            ctr("c", qos=BE, ann={MEMORY_TYPE: "hbm"}),
            AllocationError,
            "pod default/p container c: no pool can fit 0m shared; root: no hbm memory; "
            "package0: no hbm memory; package1: no hbm memory; node0: no hbm memory; "
            "node1: no hbm memory; node2: no hbm memory; node3: no hbm memory",
            id="no-hbm",
        ),
    ],
)
def test_errors(container: ContainerInfo, error: type[Exception], message: str) -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    with pytest.raises(error) as exc:
        p.allocate(p.initial_state(), container)
    assert str(exc.value) == message


def test_exclusive_that_fits_nowhere_names_every_pool() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    with pytest.raises(AllocationError) as exc:
        p.allocate(p.initial_state(), ctr("c", milli=16000))
    assert str(exc.value).startswith(
        "pod default/p container c: no pool can fit 16 exclusive CPUs; "
        "root: 15000m of shared capacity allocatable, 16000m needed; "
        "package0: 7000m of shared capacity allocatable, 16000m needed"
    )


def test_a_shared_pool_is_never_emptied_under_shared_containers_and_fallback() -> None:
    p = TopologyAwarePolicy(topology=small(), config={})
    # nobody shares: all 15 non-reserved CPUs may go (n4c16 test16-idle-shared-pools)
    d = p.allocate(p.initial_state(), ctr("c", milli=15000))
    assert d.assignment is not None and len(d.assignment.cpus) == 15
    with pytest.raises(AllocationError, match="no pool can fit 0m shared; root: no shared CPUs"):
        p.allocate(d.state, ctr("be", pod="be", qos=BE))
    # a BestEffort container (0m) shares root: its last CPU is not taken (the 1m rule)
    be = p.allocate(p.initial_state(), ctr("be", pod="be", qos=BE)).state
    with pytest.raises(AllocationError, match="root: 14999m of shared capacity allocatable"):
        p.allocate(be, ctr("c", milli=15000))
    # with fallbackToShared the 15000m are tried shared, and the 1m rule refuses them too
    q = TopologyAwarePolicy(topology=small(), config={"fallbackToShared": True})
    be = q.allocate(q.initial_state(), ctr("be", pod="be", qos=BE)).state
    with pytest.raises(AllocationError, match="no pool can fit 15000m shared; root: 14999m"):
        q.allocate(be, ctr("c", milli=15000))
    d = q.allocate(be, ctr("c", milli=14500))
    assert d.assignment is not None
    assert (d.assignment.kind, d.assignment.pool) == (CPUKind.SHARED, "root")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        pytest.param(
            {"reservedResources": {"cpu": "0"}},
            "reservedResources.cpu: expected a non-zero CPU amount, found '0'",
            id="zero",
        ),
        pytest.param(
            {"reservedResources": {}},
            "reservedResources.cpu: expected a quantity such as 750m or cpuset:0-1 (required), "
            "found none",
            id="absent",
        ),
        pytest.param(
            {"reservedResources": {"cpu": "cpuset:0-99"}},
            "includes CPUs 16-99 outside the available CPUs 0-15",
            id="outside",
        ),
        pytest.param(
            {"availableResources": {"cpu": "0-3"}},
            "availableResources.cpu: expected cpuset:LIST or exclude-cpuset:LIST, found '0-3'",
            id="available-form",
        ),
        pytest.param(
            {"availableResources": {"cpu": "cpuset:99"}},
            "leaves no online CPU",
            id="available-empty",
        ),
        pytest.param(
            {"pinCpu": True},
            "unknown key pinCpu; expected one of defaultCPUPriority, ",
            id="typo",
        ),
        pytest.param(
            {"colocatePods": "often"},
            "colocatePods: expected a valid boolean, found 'often'",
            id="bad-bool",
        ),
        pytest.param(
            {"reservedResources": {"cpu": "cpuset:0-15"}},
            "takes every available CPU",
            id="all-reserved",
        ),
    ],
)
def test_config_errors(config: Mapping[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"^policy topology-aware: ") as exc:
        TopologyAwarePolicy(topology=small(), config=config)
    assert message in str(exc.value)
