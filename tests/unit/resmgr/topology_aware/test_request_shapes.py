"""A Synchronize's requests by shape (`preferences.RequestShapes`) are `container_request`'s.

A container with no annotation of the policy's domain on it or its pod gets the request of
the first container of its QoS class, resources and namespace, with its own subject and
affinity rules.  For random containers (every QoS class, the CPU and memory annotations,
unrelated annotations, kube-system, container-level annotations) and configurations, each
request made so equals `container_request`'s, errors included; and a rebuild of random
reports decides exactly what it decides with every request worked out one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import AllocationError, AnnotationError, ContainerInfo, QoSClass
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, rebuild
from nri_resmgr.policy.topology_aware.config import ResolvedConfig, resolve_config
from nri_resmgr.policy.topology_aware.preferences import (
    CPU_PRESERVE,
    PREFER_SHARED,
    ContainerRequest,
    RequestShapes,
    container_request,
    request_shape,
)
from nri_resmgr.topology.model import Topology
from tests.support.builders import ctr, topo, with_current
from tests.support.topology_aware import OPS, SYNTHETIC, Op, make

CONFIGS = st.fixed_dictionaries(
    {},
    optional={
        "colocatePods": st.booleans(),
        "colocateNamespaces": st.booleans(),
        "preferIsolatedCPUs": st.booleans(),
        "preferSharedCPUs": st.booleans(),
        "reservedPoolNamespaces": st.sampled_from([["default"], ["kube-*"], []]),
        "unlimitedBurstable": st.sampled_from(["system", "package", "numa"]),
    },
)
#: annotations no policy reads, on the pod or the container
UNRELATED = st.dictionaries(
    st.sampled_from(["kubernetes.io/config.seen", "io.kubernetes.pod.uid", "app"]),
    st.sampled_from(["x", "y"]),
    max_size=2,
)
#: a domain annotation on the container itself (the pod's come with `Op.annotations`)
OWN = st.sampled_from([{}, {}, {}, {CPU_PRESERVE: "true"}, {f"{PREFER_SHARED}/pod": "true"}])

TOPOLOGY: Topology = topo(**SYNTHETIC["2s2n2c2t"])


def _asked(ask: Callable[[ContainerInfo], ContainerRequest], c: ContainerInfo) -> object:
    try:
        return ask(c)
    except AnnotationError as exc:
        return ("error", str(exc))


def _container(op: Op, unrelated: dict[str, str], own: dict[str, str]) -> ContainerInfo:
    c = make(op)
    pod = replace(c.pod, annotations={**unrelated, **c.pod.annotations})
    return replace(c, pod=pod, annotations={**unrelated, **own})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=CONFIGS, data=st.data())
def test_requests_by_shape_are_container_requests(
    config: dict[str, Any], data: st.DataObject
) -> None:
    resolved: ResolvedConfig = resolve_config(TOPOLOGY, config)
    shapes = RequestShapes(resolved)
    ops = data.draw(OPS)
    for op in ops:
        c = _container(op, data.draw(UNRELATED), data.draw(OWN))
        assert _asked(shapes.of, c) == _asked(lambda x: container_request(x, resolved), c)


def test_a_shape_is_taken_only_without_domain_annotations() -> None:
    plain = ctr("a", qos=QoSClass.BURSTABLE, milli=100, ann={"kubernetes.io/x": "1"})
    assert request_shape(plain) is not None
    assert request_shape(replace(plain, annotations={CPU_PRESERVE: "true"})) is None
    on_pod = ctr("a", qos=QoSClass.BURSTABLE, milli=100, ann={f"{PREFER_SHARED}/pod": "true"})
    assert request_shape(on_pod) is None


def test_containers_of_one_shape_keep_their_own_subject_and_affinities() -> None:
    resolved = resolve_config(TOPOLOGY, {"colocatePods": True, "colocateNamespaces": True})
    shapes = RequestShapes(resolved)
    first = shapes.of(ctr("a", pod="p1", qos=QoSClass.BURSTABLE, milli=100))
    second = shapes.of(ctr("a", pod="p2", qos=QoSClass.BURSTABLE, milli=100))
    assert first.subject is not None and second.subject is not None
    assert (first.subject.pod_name, second.subject.pod_name) == ("p1", "p2")
    assert first.affinities != second.affinities
    assert replace(second, subject=first.subject, affinities=first.affinities) == first


@pytest.mark.parametrize("name", ["2s2n2c2t", "1s2d-l3-isolated"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=CONFIGS, data=st.data())
def test_a_rebuild_by_shapes_decides_what_one_by_one_decides(
    name: str, config: dict[str, Any], data: st.DataObject
) -> None:
    """Random containers placed live, reported with their cpusets (or, drawn, none: a
    cold start), rebuilt with requests by shape and with each worked out on its own."""
    p = TopologyAwarePolicy(topology=topo(**SYNTHETIC[name]), config=config)
    s = p.initial_state()
    live: dict[str, ContainerInfo] = {}
    for op in data.draw(OPS):
        c = _container(op, data.draw(UNRELATED), {})
        if c.id in live:
            continue
        try:
            s = p.allocate(s, c).state
        except (AllocationError, AnnotationError):
            continue
        live[c.id] = c
    rendered = p.render(s)
    cold = data.draw(st.booleans())
    reported = [
        c if cold else with_current(c, rendered[c.id].cpus, rendered[c.id].mems)
        for c in live.values()
    ]
    by_shape = p.rebuild(reported)

    class OneByOne(RequestShapes):
        def of(self, container: ContainerInfo) -> ContainerRequest:
            return container_request(container, self.config)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(rebuild, "RequestShapes", OneByOne)
        plain = p.rebuild(reported)
    assert by_shape.state == plain.state
    assert by_shape.updates == plain.updates
    assert by_shape.reason == plain.reason
    assert {c: g.request for c, g in by_shape.state.grants.items()} == {
        c: g.request for c, g in plain.state.grants.items()
    }
