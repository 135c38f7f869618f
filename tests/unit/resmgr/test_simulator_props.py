"""The simulator as properties: random pod lifecycles (create, delete, update, restart) on
every policy keep the runtime's view and the pipeline's in step, with the invariants
held after every step.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.model import ContainerID
from nri_resmgr.policy_registry import load_policy
from nri_resmgr.simulator.kubelet import Simulator
from nri_resmgr.simulator.scenario import (
    ContainerSpec,
    DeleteSpec,
    PodSpec,
    Resources,
)
from nri_resmgr.topology.synthetic import build_topology
from tests.support.logs import QUIET

TOPO = build_topology({"packages": 2, "dies": 1, "nodes": 2, "cores": 2, "threads": 2})


POLICIES: dict[str, dict[str, Any]] = {
    "static": {"reservedSystemCPUs": "0"},
    "topology-aware": {"reservedResources": {"cpu": "750m"}},
}


OPS = st.one_of(
    st.tuples(st.just("guaranteed"), st.integers(1, 6)),
    st.tuples(st.just("burstable"), st.integers(0, 3000)),
    st.tuples(st.just("delete"), st.integers(0, 20)),
    st.tuples(st.just("restart"), st.just(0)),
)


def check_invariants(sim: Simulator) -> None:
    pipeline = sim.pipeline
    exclusive: set[int] = set()
    for cid, (_, c) in sim.live.items():
        a = pipeline.assignments[ContainerID(cid)]
        # what the runtime applied is what the pipeline believes
        assert c.linux.resources.cpu.cpus == str(a.cpus), (cid, a)
        if a.kind in ("exclusive", "isolated"):
            assert exclusive.isdisjoint(a.cpus.ids()), (cid, a.cpus, exclusive)
            exclusive |= a.cpus.ids()
    for cid in sim.live:
        a = pipeline.assignments[ContainerID(cid)]
        if a.kind in ("shared", "reserved"):
            assert a.cpus, cid
    assert set(pipeline.containers) == set(sim.live)
    # the pipeline records only what each decision names: that must be the whole truth,
    # i.e. equal to a full rendering of the policy's state
    render = getattr(pipeline.policy, "render", None)
    if callable(render):
        canonical = render(pipeline.state)
        for cid in sim.live:
            a, b = pipeline.assignments[ContainerID(cid)], canonical[ContainerID(cid)]
            assert (a.cpus, a.mems, a.kind) == (b.cpus, b.mems, b.kind), (cid, a, b)


@pytest.mark.parametrize("policy_name", list(POLICIES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, max_size=25))
def test_random_lifecycles_keep_runtime_and_pipeline_in_step(
    policy_name: str, ops: list[tuple[str, int]]
) -> None:
    policy = load_policy(policy_name, topology=TOPO, config=POLICIES[policy_name])
    sim = Simulator(policy=policy, log=QUIET)
    live: list[str] = []
    for i, (op, n) in enumerate(ops):
        if op == "guaranteed":
            q = {"cpu": str(n), "memory": "100M"}
            sim.create(
                PodSpec(
                    pod=f"p{i}",
                    containers=(
                        ContainerSpec(name="c", requests=Resources(**q), limits=Resources(**q)),
                    ),
                )
            )
            live.append(f"p{i}")
        elif op == "burstable":
            sim.create(
                PodSpec(
                    pod=f"p{i}",
                    containers=(ContainerSpec(name="c", requests=Resources(cpu=f"{n}m")),),
                )
            )
            live.append(f"p{i}")
        elif op == "delete" and live:
            sim.delete(DeleteSpec(pod=live.pop(n % len(live))))
        elif op == "restart":
            before = {cid: str(a.cpus) for cid, a in sim.pipeline.assignments.items()}
            _, moved = sim.restart()
            # a restart moves nothing the daemon itself placed
            assert moved == {}, moved
            after = {cid: str(a.cpus) for cid, a in sim.pipeline.assignments.items()}
            assert after == before
        check_invariants(sim)
