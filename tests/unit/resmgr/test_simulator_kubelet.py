"""The simulator's kubelet: CPU and memory quantities, pod QoS classes and container
resources computed as the kubelet does, and read back by the adapter as it reads a real
kubelet's.
"""

from __future__ import annotations

from typing import Any

import pytest

from nri_resmgr.model import QoSClass, Request
from nri_resmgr.runtime import adapter
from nri_resmgr.simulator.kubelet import container_resources, pod_qos
from nri_resmgr.simulator.scenario import (
    ContainerSpec,
    PodSpec,
    Resources,
    ScenarioError,
    parse_cpu,
    parse_memory,
)


def spec(
    name: str, req: dict[str, Any] | None = None, lim: dict[str, Any] | None = None
) -> ContainerSpec:
    return ContainerSpec(
        name=name, requests=Resources(**(req or {})), limits=Resources(**(lim or {}))
    )


@pytest.mark.parametrize(
    ("text", "milli"), [("1", 1000), ("500m", 500), ("1.5", 1500), (2, 2000), ("0.1", 100)]
)
def test_parse_cpu(text: str | int, milli: int) -> None:
    assert parse_cpu(text, what="x") == milli


@pytest.mark.parametrize(
    ("text", "size"),
    [("100M", 100 * 10**6), ("1Gi", 1 << 30), ("2G", 2 * 10**9), (1024, 1024), ("64Ki", 65536)],
)
def test_parse_memory(text: str | int, size: int) -> None:
    assert parse_memory(text, what="x") == size


def test_bad_quantities_are_clear_errors() -> None:
    with pytest.raises(ScenarioError, match=r"c0 requests.cpu: expected a CPU quantity.*'lots'"):
        pod_qos(PodSpec(pod="p", containers=(spec("c0", {"cpu": "lots"}),)))
    with pytest.raises(ScenarioError, match="expected a memory quantity"):
        parse_memory("1XB", what="m")


@pytest.mark.parametrize(
    ("containers", "inits", "qos"),
    [
        ((spec("a"),), (), QoSClass.BEST_EFFORT),
        ((spec("a", lim={"cpu": "1", "memory": "1G"}),), (), QoSClass.GUARANTEED),
        (
            (spec("a", {"cpu": "1", "memory": "1G"}, {"cpu": "1", "memory": "1G"}),),
            (),
            QoSClass.GUARANTEED,
        ),
        ((spec("a", {"cpu": "500m"}, {"cpu": "1", "memory": "1G"}),), (), QoSClass.BURSTABLE),
        ((spec("a", lim={"cpu": "1", "memory": "1G"}), spec("b")), (), QoSClass.BURSTABLE),
        ((spec("a", lim={"cpu": "1", "memory": "1G"}),), (spec("i"),), QoSClass.BURSTABLE),
        ((spec("a"),), (spec("i", {"cpu": "100m"}),), QoSClass.BURSTABLE),
    ],
    ids=["none", "limits-only", "equal", "request-below", "one-empty", "init-empty", "init-req"],
)
def test_pod_qos_follows_kubernetes(
    containers: tuple[ContainerSpec, ...], inits: tuple[ContainerSpec, ...], qos: QoSClass
) -> None:
    assert pod_qos(PodSpec(pod="p", containers=containers, init_containers=inits)) == qos


@pytest.mark.parametrize(
    ("c", "shares", "quota", "mem"),
    [
        (spec("a"), 2, None, None),
        (spec("a", {"cpu": "250m"}), 256, None, None),
        (spec("a", lim={"cpu": "2", "memory": "1Gi"}), 2048, 200000, 1 << 30),
        (spec("a", {"cpu": "1m"}, {"cpu": "5m"}), 2, 1000, None),
    ],
    ids=["besteffort", "request", "limit-defaults-request", "min-quota"],
)
def test_container_resources_like_the_kubelet(
    c: ContainerSpec, shares: int, quota: int | None, mem: int | None
) -> None:
    r = container_resources(c)
    assert r.cpu.shares.value == shares
    assert (r.cpu.quota.value if r.cpu.HasField("quota") else None) == quota
    assert (r.cpu.period.value if r.cpu.HasField("period") else None) == (
        100000 if quota is not None else None
    )
    assert (r.memory.limit.value if r.memory.HasField("limit") else None) == mem


def test_adapter_reads_back_what_the_kubelet_wrote() -> None:
    r = container_resources(
        spec("a", {"cpu": "1500m", "memory": "1G"}, {"cpu": "2", "memory": "2G"})
    )
    assert adapter.request_from_resources(r) == Request(
        cpu_request_milli=1500, cpu_limit_milli=2000, memory_limit=2 * 10**9
    )
