"""The balloons policy under test: its machine, containers with pod labels, a policy whose
invariants are checked after every step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nri_resmgr.model import ContainerInfo, QoSClass
from nri_resmgr.policy.balloons import BalloonsPolicy, BalloonsState
from nri_resmgr.topology.model import Topology
from tests.support.builders import ctr, topo

__all__ = ["bctr", "machine", "policy", "run"]


def machine() -> Topology:
    """2 packages x 2 nodes x 4 cores x 2 threads: 32 CPUs (node 0 is 0-3,16-19)."""
    return topo(packages=2, nodes=2, cores=4, threads=2, memory="2G")


def policy(config: Mapping[str, Any], topology: Topology | None = None) -> BalloonsPolicy:
    return BalloonsPolicy(topology=topology or machine(), config=config)


def bctr(
    name: str,
    *,
    pod: str = "p",
    ns: str = "default",
    milli: int = 0,
    labels: Mapping[str, str] | None = None,
    ann: Mapping[str, str] | None = None,
    qos: QoSClass | None = None,
    cur: str | None = None,
    cur_mems: str | None = None,
) -> ContainerInfo:
    """A container of pod `pod`; `labels` are the pod's labels."""
    if qos is None:
        qos = QoSClass.BURSTABLE if milli else QoSClass.BEST_EFFORT
    c = ctr(
        name, pod=pod, ns=ns, milli=milli, ann=ann, qos=qos, cur=cur, cur_mems=cur_mems, limit=None
    )
    return replace(c, pod=replace(c.pod, labels=dict(labels or {})))


def run(p: BalloonsPolicy, *containers: ContainerInfo) -> BalloonsState:
    """The state after creating `containers` in order, invariants checked each step."""
    st = p.initial_state()
    p.check(st)
    for c in containers:
        st = p.allocate(st, c).state
        p.check(st)
    return st
