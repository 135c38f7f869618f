"""The memory request of Burstable containers: nri-plugins' resource-annotator annotation.

The CRI passes a container's memory limit, not its request; for a Guaranteed pod the two
are equal, for a Burstable one the request was unknown and its memory was not counted.
nri-plugins' resource-annotator webhook writes every container's requirements into the
pod annotation ``noderesource.dev/resources``; the adapter reads the memory request
from it, and the topology-aware policy fits Burstable memory by request
(n4c16/test14-burstable: four pods whose limits exceed the node fit by their requests).
"""

from __future__ import annotations

import json

import pytest

from nri_api import api
from nri_resmgr.model import AnnotationError, ContainerInfo, QoSClass
from nri_resmgr.policy.common import parse_memory_quantity
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.runtime import adapter
from tests.support.builders import small

UID = "0d1f4d5e-5b1a-4c5e-9a0f-6d1b7c2e3f40"
ANNOTATION = adapter.RESOURCE_ANNOTATOR_ANNOTATION


def sandbox(name: str, annotated: object | None) -> api.PodSandbox:
    s = api.PodSandbox(id=f"sb-{name}", name=name, uid=UID, namespace="default")
    s.linux.cgroup_parent = f"/kubepods/burstable/pod{UID}"
    if annotated is not None:
        s.annotations[ANNOTATION] = (
            annotated if isinstance(annotated, str) else json.dumps(annotated)
        )
    return s


def container(pod: str, name: str, *, milli: int = 1000, limit: int = 5 << 30) -> api.Container:
    c = api.Container(id=f"{pod}-{name}", pod_sandbox_id=f"sb-{pod}", name=name)
    c.linux.cgroups_path = f"kubepods-burstable-pod{UID}.slice:cri-containerd:{pod}-{name}"
    res = c.linux.resources
    res.cpu.shares.value = milli * 1024 // 1000
    res.cpu.shares.SetInParent()
    res.memory.limit.value = limit
    res.memory.limit.SetInParent()
    return c


def info(pod: str, name: str, annotated: object | None, **kw: int) -> ContainerInfo:
    return adapter.container_from_nri(sandbox(pod, annotated), container(pod, name, **kw))


@pytest.mark.parametrize(
    ("text", "size"),
    [("100M", 100 * 10**6), ("2.5G", 25 * 10**8), ("1Gi", 1 << 30), ("512Ki", 512 << 10),
     ("1024", 1024), ("5k", 5000), ("1x", None), ("", None), ("-1G", None), ("1ki", None)],
)  # fmt: skip
def test_memory_quantities(text: str, size: int | None) -> None:
    assert parse_memory_quantity(text) == size


@pytest.mark.parametrize(
    "annotated",
    [
        pytest.param({"containers": {"c0": {"requests": {"memory": "100M"}}}}, id="map"),
        pytest.param({"containers": [{"name": "c0", "requests": {"memory": "100M"}}]}, id="list"),
        pytest.param(
            {"containers": [{"name": "c0", "resources": {"requests": {"memory": "100M"}}}]},
            id="list-resources",
        ),
        pytest.param({"initContainers": {"c0": {"requests": {"memory": "100M"}}}}, id="init"),
    ],
)
def test_burstable_memory_request_from_the_annotation(annotated: object) -> None:
    c = info("pod0", "c0", annotated)
    assert c.qos_class is QoSClass.BURSTABLE
    assert (c.request.memory_request, c.request.memory_limit) == (100 * 10**6, 5 << 30)


@pytest.mark.parametrize(
    "annotated",
    [
        None,
        {"containers": {"other": {"requests": {"memory": "100M"}}}},
        {"containers": {"c0": {"limits": {"memory": "1G"}}}},
        {"containers": {"c0": None}},
    ],
    ids=["absent", "other-container", "no-request", "null"],
)
def test_no_annotated_request_leaves_it_unknown(annotated: object) -> None:
    assert info("pod0", "c0", annotated).request.memory_request is None


def test_a_malformed_request_names_the_annotation_and_the_container() -> None:
    annotated = {"containers": {"c0": {"requests": {"memory": "lots"}}}}
    with pytest.raises(AnnotationError) as exc:
        info("pod0", "c0", annotated)
    assert str(exc.value) == (
        "pod default/pod0 container c0: annotation noderesource.dev/resources: "
        "containers.c0.requests.memory is 'lots'; expected a memory quantity such as 100M "
        "or 1Gi"
    )


def test_burstable_memory_fits_by_request() -> None:
    """n4c16/test14-burstable (pod0-pod3): limits of 2.5G, 5G, 2.5G and none on a machine
    of 4 x 2G fit by their requests (100M, 200M, 100M, 200M); a 3G request (limit 4G,
    which a package holds) does not fit a 2G NUMA node and goes to a package, as its
    memory is now counted."""
    p = TopologyAwarePolicy(topology=small(), config={"colocatePods": True})
    s = p.initial_state()
    G = 10**9
    pods = [("pod0", "100M", 25 * G // 10), ("pod1", "200M", 5 * G), ("pod2", "100M", 25 * G // 10),
            ("pod3", "200M", 0)]  # fmt: skip
    for pod, req, lim in pods:
        annotated = {"containers": {f"{pod}c0": {"requests": {"memory": req}}}}
        c = info(pod, f"{pod}c0", annotated, limit=lim)
        s = p.allocate(s, c).state
        p.check(s)
    assert sum(g.request.memory_bytes for g in s.grants.values()) == 600 * 10**6
    big = info("big", "m", {"containers": {"m": {"requests": {"memory": "3G"}}}}, limit=4 * G)
    d = p.allocate(s, big)
    p.check(d.state)
    assert d.assignment is not None and d.assignment.pool.startswith("package")
    assert len(d.assignment.mems) == 2
