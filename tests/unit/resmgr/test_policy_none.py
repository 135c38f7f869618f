"""The none policy: observes, never pins, never updates."""

from __future__ import annotations

import pytest

from nri_resmgr.model import ConfigError, ContainerID, CPUKind
from nri_resmgr.policy.none import NonePolicy, NoneState
from tests.support.builders import ctr, small


def test_allocate_release_rebuild_change_nothing() -> None:
    p = NonePolicy(topology=small(), config={})
    s = p.initial_state()
    d = p.allocate(s, ctr("a", milli=2000))
    assert d.assignment is not None
    assert d.assignment.kind is CPUKind.NONE
    assert not d.assignment.cpus and not d.assignment.mems and d.updates == ()
    assert d.state == NoneState(frozenset({d.assignment.container_id}))
    assert p.release(d.state, d.assignment.container_id).state == s
    r = p.rebuild([ctr("a", cur="0-3"), ctr("b", cur="5")])
    assert r.updates == ()
    assert r.state == NoneState(frozenset({ContainerID("p-a"), ContainerID("p-b")}))


def test_rejects_unknown_config() -> None:
    with pytest.raises(ConfigError, match="policy none: unknown key pinCPU"):
        NonePolicy(topology=small(), config={"pinCPU": True})
