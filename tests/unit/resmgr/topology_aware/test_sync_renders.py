"""A Synchronize renders each topology-aware container at most once.

A cold Synchronize renders the rebuilt state (to find the movers) and the pipeline's
commit renders it again (every container's assignment); a restart from placement
records renders the restored state for the invariants, for the rule's comparison with
the reports, and for the commit.  All of them go through the policy's `RenderMemo`
(`TopologyAwarePolicy.render`, `Rebuilder`), so the one state is rendered once and the
others are lookups; and the assignments are `render`'s own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nri_api import api
from nri_resmgr.model import Assignment, ContainerID
from nri_resmgr.policy.kit.rebuild import RESTORED
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState, rendering
from nri_resmgr.policy.topology_aware.rendering import render_all
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.runtime.record_store import RECORD_FILE, RecordStore
from tests.support.builders import topo
from tests.support.logs import QUIET, CapturedLog
from tests.support.pipeline import container, sandbox

#: (pod, Guaranteed, cpu, limit): exclusive, shared Burstable and Guaranteed fractions
WORKLOAD = [
    (f"p{i}", i % 3 == 0, "1" if i % 3 == 0 else "200m", "1" if i % 3 == 0 else None)
    for i in range(12)
]


def _pipeline(path: Path, log: Any = QUIET) -> Pipeline:
    policy = TopologyAwarePolicy(topology=topo(packages=1, cores=8, threads=2, nodes=2), config={})
    return Pipeline(policy, log=log, record_store=RecordStore(path, scope="ta/test", log=QUIET))


def _report() -> tuple[list[api.PodSandbox], list[api.Container]]:
    pods, ctrs = [], []
    for name, guaranteed, cpu, limit in WORKLOAD:
        pod = sandbox(name, guaranteed=guaranteed)
        pods.append(pod)
        ctrs.append(container(pod, "c", cpu=cpu, limit=limit))
    return pods, ctrs


def _placed(ctrs: list[api.Container], p: Pipeline) -> list[api.Container]:
    """The report of `ctrs` once each runs where `p` placed it."""
    out = []
    for c in ctrs:
        a = p.assignments[ContainerID(c.id)]
        now = api.Container()
        now.CopyFrom(c)
        now.linux.resources.cpu.cpus = str(a.cpus)
        now.linux.resources.cpu.mems = str(a.mems)
        out.append(now)
    return out


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[ContainerID]:
    """The container of every `rendering.render` call from now on."""
    calls: list[ContainerID] = []
    real = rendering.render

    def counting(**kw: Any) -> Assignment:
        calls.append(kw["grant"].container_id)
        return real(**kw)

    monkeypatch.setattr(rendering, "render", counting)
    return calls


def _assert_rendered_as_render_all(p: Pipeline) -> None:
    assert isinstance(p.state, TopologyAwareState)
    assert isinstance(p.policy, TopologyAwarePolicy)
    want = render_all(p.policy.topology, p.state)
    assert {cid: (a.cpus, a.mems, a.kind, a.pool) for cid, a in p.assignments.items()} == {
        cid: (a.cpus, a.mems, a.kind, a.pool) for cid, a in want.items()
    }


def test_a_cold_synchronize_renders_each_container_at_most_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _pipeline(tmp_path / RECORD_FILE)
    calls = _counted(monkeypatch)
    p.synchronize(*_report())
    assert len(p.assignments) == len(WORKLOAD)
    assert len(calls) <= len(WORKLOAD), sorted(calls)
    _assert_rendered_as_render_all(p)


def test_a_restart_from_records_renders_each_container_at_most_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _pipeline(tmp_path / RECORD_FILE)
    pods, ctrs = _report()
    first.synchronize(pods, ctrs)
    now = _placed(ctrs, first)
    captured = CapturedLog()
    p = _pipeline(tmp_path / RECORD_FILE, captured.log)
    calls = _counted(monkeypatch)
    assert p.synchronize(pods, now) == []
    assert [line["reason"] for line in captured.events("rebuilt")] == [RESTORED]
    assert len(calls) <= len(WORKLOAD), sorted(calls)
    _assert_rendered_as_render_all(p)
