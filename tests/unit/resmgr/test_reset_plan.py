"""The reset plan (issue 10 item 11): containers + allowed sets -> updates back to full."""

from __future__ import annotations

import pytest

from nri_api import api
from nri_resmgr.ops.reset import Verdict, plan_reset, termination_verdict
from nri_resmgr.topology.cpuset import CPUSet

ALL_CPUS = CPUSet.parse("0-7")
ALL_MEMS = CPUSet.parse("0-1")


def _pod(sid: str = "sb0", name: str = "web") -> api.PodSandbox:
    return api.PodSandbox(id=sid, name=name, namespace="prod", uid=f"uid-{sid}")


def _ctr(
    cid: str,
    *,
    cpus: str | None,
    mems: str | None,
    sid: str = "sb0",
    state: int = api.ContainerState.CONTAINER_RUNNING,
) -> api.Container:
    c = api.Container(id=cid, pod_sandbox_id=sid, name=f"name-{cid}")
    c.state = state  # type: ignore[assignment]
    c.linux.cgroups_path = f"/kubepods/{cid}"
    if cpus is not None or mems is not None:
        c.linux.resources.cpu.cpus = cpus or ""
        c.linux.resources.cpu.mems = mems or ""
    return c


def _plan(*containers: api.Container, keep: tuple[str, ...] = ()) -> tuple[set[str], set[str]]:
    plan = plan_reset([_pod()], containers, cpus=ALL_CPUS, mems=ALL_MEMS, keep=keep)
    assert [u.container_id for u in plan.updates] == [r.container_id for r in plan.reset]
    return {r.container_id for r in plan.reset}, {k.container_id for k in plan.kept}


@pytest.mark.parametrize(
    ("cpus", "mems", "reset"),
    [
        ("2-3", "0", True),  # exclusive: both narrowed
        ("0-1,4-7", "0-1", True),  # shared pool that shrank around an exclusive grant
        ("0-7", "0", True),  # memory pinned only
        ("0-7", "0-1", False),  # already full
        ("", "", False),  # never pinned: inherits the parent's full set
        (None, None, False),  # no resources at all
        ("0-15", "0-3", False),  # wider than online (CPUs went offline): not narrowed
        ("0-3,x", "0", True),  # unreadable: not the full set, whatever it is
    ],
    ids=[
        "exclusive",
        "shrunk-shared",
        "mems-only",
        "full",
        "unset",
        "no-resources",
        "wider",
        "unreadable",
    ],
)
def test_which_containers_are_reset(cpus: str | None, mems: str | None, reset: bool) -> None:
    done, kept = _plan(_ctr("c1", cpus=cpus, mems=mems))
    assert done == ({"c1"} if reset else set())
    assert kept == (set() if reset else {"c1"})


def test_updates_write_the_full_cpus_and_mems_and_nothing_else() -> None:
    plan = plan_reset([_pod()], [_ctr("c1", cpus="3", mems="1")], cpus=ALL_CPUS, mems=ALL_MEMS)
    (update,) = plan.updates
    assert update.container_id == "c1"
    assert update.linux.resources.cpu.cpus == "0-7"
    assert update.linux.resources.cpu.mems == "0-1"
    assert not update.ignore_failure
    # only the cpuset: no shares, quota, memory limit, classes
    assert update.linux.resources.ListFields() == [
        (api.LinuxResources.DESCRIPTOR.fields_by_name["cpu"], update.linux.resources.cpu)
    ]
    assert not update.linux.resources.cpu.HasField("shares")
    assert not update.linux.resources.cpu.HasField("quota")


@pytest.mark.parametrize(
    "state",
    [api.ContainerState.CONTAINER_STOPPED, api.ContainerState.CONTAINER_UNKNOWN],
    ids=["stopped", "unknown"],
)
def test_dead_containers_are_not_updated(state: int) -> None:
    done, kept = _plan(_ctr("c1", cpus="1", mems="0", state=state))
    assert done == set()
    assert kept == {"c1"}


@pytest.mark.parametrize(
    "state",
    [api.ContainerState.CONTAINER_CREATED, api.ContainerState.CONTAINER_PAUSED],
    ids=["created", "paused"],
)
def test_created_and_paused_containers_are_updated(state: int) -> None:
    done, _ = _plan(_ctr("c1", cpus="1", mems="0", state=state))
    assert done == {"c1"}


def test_keep_spares_named_containers() -> None:
    done, kept = _plan(_ctr("c1", cpus="1", mems="0"), _ctr("c2", cpus="2", mems="0"), keep=("c2",))
    assert (done, kept) == ({"c1"}, {"c2"})


def test_mixed_node_every_pinned_container_and_only_those() -> None:
    containers = [
        _ctr("excl", cpus="2-3", mems="0"),
        _ctr("shared-a", cpus="0-1,4-7", mems="0-1"),
        _ctr("shared-b", cpus="0-1,4-7", mems="0-1", sid="sb1"),
        _ctr("besteffort-untouched", cpus="", mems=""),
        _ctr("gone", cpus="5", mems="1", state=api.ContainerState.CONTAINER_STOPPED),
    ]
    plan = plan_reset([_pod(), _pod("sb1", "db")], containers, cpus=ALL_CPUS, mems=ALL_MEMS)
    assert [r.container_id for r in plan.reset] == ["excl", "shared-a", "shared-b"]
    subjects = {r.container_id: r.subject for r in plan.reset}
    assert subjects["shared-b"] == "pod prod/db container name-shared-b"
    assert subjects["excl"] == "pod prod/web container name-excl"
    reasons = {r.container_id: r.reason for r in plan.reset}
    assert reasons["excl"] == "cpus lacks 0-1,4-7, mems lacks 1"
    assert {k.container_id for k in plan.kept} == {"besteffort-untouched", "gone"}


def test_a_container_of_an_unknown_pod_is_still_reset() -> None:
    plan = plan_reset(
        [], [_ctr("c1", cpus="1", mems="0", sid="lost")], cpus=ALL_CPUS, mems=ALL_MEMS
    )
    assert [r.subject for r in plan.reset] == ["pod sandbox lost container name-c1"]


@pytest.mark.parametrize(("cpus", "mems"), [("", "0"), ("0-3", "")], ids=["no-cpus", "no-mems"])
def test_empty_allowed_sets_are_refused(cpus: str, mems: str) -> None:
    with pytest.raises(ValueError, match="expected the host's"):
        plan_reset([_pod()], [], cpus=CPUSet.parse(cpus), mems=CPUSet.parse(mems))


def _ds(uid: str = "u1", **meta: str) -> dict[str, dict[str, str]]:
    return {"metadata": {"name": "nri-resmgr", "namespace": "kube-system", "uid": uid, **meta}}


@pytest.mark.parametrize(
    ("started", "status", "obj", "verdict", "why"),
    [
        ("u1", 200, _ds(), Verdict.KEEP, "still exists: a restart"),
        (None, 200, _ds(), Verdict.KEEP, "still exists: a restart"),
        ("u1", 200, _ds(deletionTimestamp="2026-11-23T18:00:00Z"), Verdict.RESET, "being deleted"),
        ("u1", 200, _ds("u2"), Verdict.RESET, "created anew"),
        ("u1", 404, None, Verdict.RESET, "gone (uninstalled)"),
        (None, 404, None, Verdict.RESET, "gone (uninstalled)"),
        ("u1", 401, None, Verdict.RESET, "credentials that worked at start-up (401)"),
        ("u1", 403, None, Verdict.RESET, "credentials that worked at start-up (403)"),
        (None, 403, None, Verdict.UNKNOWN, "cannot tell"),
        ("u1", 0, None, Verdict.UNKNOWN, "cannot tell"),
        ("u1", 500, None, Verdict.UNKNOWN, "cannot tell"),
    ],
    ids=[
        "restart",
        "restart-no-uid",
        "foreground",
        "recreated",
        "gone",
        "gone-no-uid",
        "revoked-401",
        "revoked-403",
        "never-allowed",
        "no-answer",
        "server-error",
    ],
)
def test_termination_verdict(
    started: str | None,
    status: int,
    obj: dict[str, dict[str, str]] | None,
    verdict: Verdict,
    why: str,
) -> None:
    got, reason = termination_verdict(started_uid=started, status=status, daemonset=obj)
    assert got is verdict
    assert why in reason
