"""The restart rule as a checker the restart tests share.

The rule (docs/architecture.md, "State and restarts"): after any Synchronize, whatever
the runtime reports, no CPU is exclusive to one container and in the cpuset of another;
and a container whose reported cpuset conflicts with a valid exclusive grant is the one
that moves.

`final_cpusets` applies a rebuild's updates to the reported cpusets (an update with
CPUs replaces the report; no update, or one without CPUs, leaves it), which is what the
kernel holds once the runtime has applied them.  `restart_violations` lists every
breach of the first half on that final picture.  Containers that opted out of CPU
pinning (``cpu.preserve``, or ``pinCPU: false``) are left where they are by request and
are not checked.

`assert_restart_exact` is issue 24's property of a state reached by decisions: with the
placement records the daemon keeps (through their file form), a restart given the
runtime's report of that state restores exactly that state (for balloons, in the same
order) and moves nothing, and so does a second restart; with the records lost, the
rebuild still keeps the restart rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from nri_resmgr.model import (
    AnnotationError,
    Assignment,
    ContainerID,
    ContainerInfo,
    Decision,
    PolicyState,
)
from nri_resmgr.policy.balloons import BalloonsPolicy, BalloonsState
from nri_resmgr.policy.kit.rebuild import RESTORED, records_of, restart
from nri_resmgr.policy.kit.records import PlacementRecord, decode, encode, encode_line
from nri_resmgr.policy.static import StaticPolicy, StaticState
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.policy.topology_aware.preferences import container_request
from nri_resmgr.topology.cpuset import CPUSet, IDSet

RestartPolicy = StaticPolicy | TopologyAwarePolicy | BalloonsPolicy


def render(policy: RestartPolicy, state: PolicyState) -> dict[ContainerID, Assignment]:
    """Every container's assignment in `state`, for any of the policies."""
    if isinstance(policy, BalloonsPolicy):
        assert isinstance(state, BalloonsState)
        return policy.render(state)
    if isinstance(policy, StaticPolicy):
        assert isinstance(state, StaticState)
        return policy.render(state)
    assert isinstance(state, TopologyAwareState)
    return policy.render(state)


def final_cpusets(
    containers: Sequence[ContainerInfo], decision: Decision
) -> dict[ContainerID, CPUSet]:
    """Each container's cpuset once the decision's updates are applied to the reports."""
    final = {c.id: c.current_cpus or IDSet() for c in containers}
    for u in decision.updates:
        if u.cpus:
            final[u.container_id] = u.cpus
    return final


def applied(containers: Sequence[ContainerInfo], decision: Decision) -> list[ContainerInfo]:
    """`containers` as the runtime reports them once the decision's updates are applied."""
    updates = {u.container_id: u for u in decision.updates}
    out = []
    for c in containers:
        u = updates.get(c.id)
        if u is not None:
            c = replace(
                c, current_cpus=u.cpus or c.current_cpus, current_mems=u.mems or c.current_mems
            )
        out.append(c)
    return out


def exclusive_cpus(policy: RestartPolicy, state: PolicyState) -> dict[ContainerID, CPUSet]:
    """The CPUs each pinned container holds exclusively in `state`.

    A hide-hyperthreads grant holds whole cores though it shows one thread of each:
    the hidden siblings are its own too.
    """
    if isinstance(policy, BalloonsPolicy):
        assert isinstance(state, BalloonsState)
        return {cid: state.balloons[m.balloon].cpus for cid, m in state.members.items()}
    if isinstance(policy, StaticPolicy):
        assert isinstance(state, StaticState)
        return {cid: e.exclusive for cid, e in state.entries.items() if e.exclusive}
    assert isinstance(state, TopologyAwareState)
    return {
        cid: g.exclusive for cid, g in state.grants.items() if g.exclusive and g.request.pin_cpu
    }


def companions(policy: RestartPolicy, state: PolicyState) -> dict[ContainerID, str]:
    """The balloon of every container in one (balloons); no one shares otherwise."""
    if isinstance(policy, BalloonsPolicy):
        assert isinstance(state, BalloonsState)
        return {cid: m.balloon for cid, m in state.members.items()}
    return {}


def opted_out(policy: RestartPolicy, containers: Sequence[ContainerInfo]) -> set[ContainerID]:
    """Containers whose CPUs the policy leaves alone at their own request.

    Decided from the containers and the configuration, not from the decision: a policy
    that gives up on a container must not make it "opted out".
    """
    if isinstance(policy, StaticPolicy):
        return set()
    if isinstance(policy, BalloonsPolicy):
        pinned = policy.config.options.pin_cpu
        return {c.id for c in containers if not pinned or policy.preserved(c) is not None}
    out = set()
    for c in containers:
        try:
            request = container_request(c, policy.config)
        except AnnotationError:
            continue
        if not request.pin_cpu:
            out.add(c.id)
    return out


def restart_violations(
    policy: RestartPolicy, containers: Sequence[ContainerInfo], decision: Decision
) -> list[str]:
    """Every CPU exclusive to one container that is in another's final cpuset (one
    outside its balloon: a balloon's containers share its CPUs)."""
    final = final_cpusets(containers, decision)
    exclusive = exclusive_cpus(policy, decision.state)
    skip = opted_out(policy, containers)
    together = companions(policy, decision.state)
    problems = []
    for owner, cpus in sorted(exclusive.items()):
        for other, now in sorted(final.items()):
            if other == owner or other in skip:
                continue
            if owner in together and together.get(other) == together[owner]:
                continue
            both = cpus & now
            if both:
                problems.append(f"cpus {both} are exclusive to {owner} and in {other}'s {now}")
    return problems


def moved(decision: Decision, containers: Sequence[ContainerInfo]) -> set[ContainerID]:
    """The containers whose final cpuset differs from what they reported."""
    final = final_cpusets(containers, decision)
    return {c.id for c in containers if final[c.id] != (c.current_cpus or IDSet())}


def unexplained_moves(decision: Decision) -> list[ContainerID]:
    """The containers `decision` updates whose id its reason does not name: a move
    without a stated cause (issue 24: a rebuild keeps a valid placement or says why it
    moves it)."""
    return [u.container_id for u in decision.updates if u.container_id not in decision.reason]


def reported(containers: Sequence[ContainerInfo]) -> Mapping[ContainerID, CPUSet]:
    return {c.id: c.current_cpus or IDSet() for c in containers}


def through_the_file(
    records: Mapping[ContainerID, PlacementRecord],
) -> dict[ContainerID, PlacementRecord]:
    """`records` written and read back, as a restart finds them."""
    data = encode("scope", [encode_line(r) for r in records.values()])
    return decode(data, scope="scope", source="records")


def assert_restart_exact(
    policy: RestartPolicy, state: PolicyState, live: Sequence[ContainerInfo]
) -> None:
    """Restarts of `state` (reached by decisions over `live`): exact with records, and
    keeping the restart rule without them (module docstring)."""
    rendered = render(policy, state)
    reports = reports_of(policy, state, live)
    for _ in range(2):  # a restart, and a second one from the first one's records
        records = through_the_file(records_of(policy, state, rendered))
        d = restart(policy, reports, records)
        assert d.updates == (), d.reason
        assert d.reason == expected_reason(live, records), d.reason
        assert d.state == state, "the restored state is the state the daemon had"
        if isinstance(state, BalloonsState):
            assert isinstance(d.state, BalloonsState)
            assert list(d.state.balloons) == list(state.balloons), "the balloons' order"
        state, rendered = d.state, render(policy, d.state)
    lost = restart(policy, reports, {})
    policy.check(lost.state)
    assert restart_violations(policy, reports, lost) == [], lost.reason


def expected_reason(
    live: Sequence[ContainerInfo], records: Mapping[ContainerID, PlacementRecord]
) -> str:
    """The reason of an idle restart of `live` with `records`: restored, naming how many
    containers no record names (balloons: those it leaves alone) were placed again;
    rebuilt when there are no records at all."""
    if not records:
        return "rebuilt"
    fresh = [c.id for c in live if c.id not in records]
    if not fresh:
        return RESTORED
    names = ", ".join(fresh[:3])
    return f"{RESTORED}; placed {len(fresh)} unrecorded container(s) ({names})"


def reports_of(
    policy: RestartPolicy, state: PolicyState, live: Sequence[ContainerInfo]
) -> list[ContainerInfo]:
    """`live` as the runtime reports them in `state`: each where the policy renders it,
    one it leaves alone (not rendered: balloons' preserved ones) as it is."""
    rendered = render(policy, state)
    return [with_current_of(c, rendered[c.id]) if c.id in rendered else c for c in live]


def with_current_of(c: ContainerInfo, a: Assignment) -> ContainerInfo:
    """`c` as the runtime reports it once given `a`."""
    return replace(c, current_cpus=a.cpus, current_mems=a.mems)
