"""Scheduling classes: configuration checks, which class a container gets, and the NRI
fields the adjustment carries (`nri_resmgr.policy.sched_classes`, `runtime.adapter`).

The scenario is nri-plugins' n4c16/test17-scheduling-classes on the same machine shape
(`small()`) and configuration; their assertions read ``policy`` and ``prio`` from
/proc/PID/sched, so `kernel_prio` turns the adjustment into that number the way the
kernel does (real-time: 99 - priority; others: 120 + nice).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_api import api
from nri_resmgr.model import (
    AnnotationError,
    Assignment,
    ConfigError,
    ContainerID,
    ContainerInfo,
    CPUKind,
    IOClass,
    QoSClass,
    SchedFlag,
    SchedPolicy,
    SchedulingClass,
)
from nri_resmgr.policy.sched_classes import (
    SCHEDULING_CLASS_ANNOTATION,
    SchedulingClassSpec,
    build_scheduling_classes,
)
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.runtime.adjustments import adjustment_for
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, small

GU, BU, BE = QoSClass.GUARANTEED, QoSClass.BURSTABLE, QoSClass.BEST_EFFORT
KEY = SCHEDULING_CLASS_ANNOTATION

# their test17 configuration, as written there
TEST17: Mapping[str, Any] = {
    "preferIsolatedCPUs": False,  # their helm-config default
    "colocatePods": False,
    "schedulingClasses": [
        {"name": "realtime", "policy": "fifo", "priority": 42},
        {"name": "highprio", "policy": "fifo", "priority": 10},
        {"name": "default", "policy": "other", "nice": 0},
        {"name": "lowprio", "policy": "other", "nice": 10},
        {"name": "idle", "policy": "idle", "nice": 17, "ioClass": "be", "ioPriority": 6},
    ],
    "namespaceSchedulingClasses": {"highprio": "highprio", "lowprio": "lowprio"},
    "podQoSSchedulingClasses": {
        "BestEffort": "lowprio",
        "Burstable": "default",
        "Guaranteed": "highprio",
    },
}

# /proc/PID/sched "policy" numbers (their SCHED_* variables)
SCHED_OTHER, SCHED_FIFO, SCHED_IDLE = 0, 1, 5
_KERNEL_POLICY = {"SCHED_OTHER": SCHED_OTHER, "SCHED_FIFO": SCHED_FIFO, "SCHED_IDLE": SCHED_IDLE}


def kernel_view(adjust: api.ContainerAdjustment) -> tuple[int, int]:
    """(policy, prio) as /proc/PID/sched would show them for the adjusted container."""
    assert adjust.linux.HasField("scheduler"), "expected a LinuxScheduler in the adjustment"
    s = adjust.linux.scheduler
    name = api.LinuxSchedulerPolicy.Name(s.policy)
    if name in ("SCHED_FIFO", "SCHED_RR"):
        return _KERNEL_POLICY[name], 99 - s.priority
    return _KERNEL_POLICY[name], 120 + s.nice


def create(
    policy: TopologyAwarePolicy, state: TopologyAwareState, c: ContainerInfo
) -> tuple[TopologyAwareState, api.ContainerAdjustment, int]:
    d = policy.allocate(state, c)
    assert d.assignment is not None
    return d.state, adjustment_for(d.assignment), len(d.assignment.cpus)


def ann(pod: str, c0: str, c1: str | None = None) -> dict[str, str]:
    out = {f"{KEY}/container.{pod}c0": c0}
    if c1 is not None:
        out[KEY] = c1
    return out


# (pod, namespace, qos, cpu milli, annotations) -> expected (policy, prio) for c0 and c1
TEST17_PODS = [
    # annotated, Guaranteed with exclusive CPUs
    ("pod0", "default", GU, 1000, ann("pod0", "realtime", "idle"),
     (SCHED_FIFO, 99 - 42), (SCHED_IDLE, 120 + 17)),
    # annotated, Guaranteed without exclusive CPUs
    ("pod1", "default", GU, 750, ann("pod1", "highprio", "idle"),
     (SCHED_FIFO, 99 - 10), (SCHED_IDLE, 120 + 17)),
    # annotated, Burstable
    ("pod2", "default", BU, 250, ann("pod2", "highprio", "lowprio"),
     (SCHED_FIFO, 99 - 10), (SCHED_OTHER, 120 + 10)),
    # annotated, BestEffort
    ("pod3", "default", BE, 0, ann("pod3", "lowprio", "idle"),
     (SCHED_OTHER, 120 + 10), (SCHED_IDLE, 120 + 17)),
    # namespace defaults
    ("pod4", "highprio", BU, 0, ann("pod4", "lowprio"),
     (SCHED_OTHER, 120 + 10), (SCHED_FIFO, 99 - 10)),
    ("pod5", "lowprio", BE, 0, ann("pod5", "highprio"),
     (SCHED_FIFO, 99 - 10), (SCHED_OTHER, 120 + 10)),
    # pod QoS defaults
    ("pod6", "default", BE, 0, ann("pod6", "idle"),
     (SCHED_IDLE, 120 + 17), (SCHED_OTHER, 120 + 10)),
    ("pod7", "default", BU, 250, ann("pod7", "lowprio"),
     (SCHED_OTHER, 120 + 10), (SCHED_OTHER, 120 + 0)),
    ("pod8", "default", GU, 250, ann("pod8", "realtime"),
     (SCHED_FIFO, 99 - 42), (SCHED_FIFO, 99 - 10)),
]  # fmt: skip


@pytest.mark.parametrize("case", TEST17_PODS, ids=[c[0] for c in TEST17_PODS])
def test_n4c16_test17_scheduling_classes(case: tuple[Any, ...]) -> None:
    """n4c16/test17-scheduling-classes: each container's policy and prio."""
    pod, ns, qos, milli, annotations, want0, want1 = case
    policy = TopologyAwarePolicy(topology=small(), config=TEST17)
    state = policy.initial_state()
    limit = 750 if qos is BU else None
    got = []
    for name in (f"{pod}c0", f"{pod}c1"):
        c = ctr(name, pod=pod, ns=ns, qos=qos, milli=milli, limit=limit, ann=annotations)
        state, adjust, ncpus = create(policy, state, c)
        got.append(kernel_view(adjust))
        # their cpus checks: one exclusive CPU for pod0 only
        assert (ncpus == 1) is (pod == "pod0"), (name, ncpus)
    assert got == [want0, want1]


def test_idle_class_carries_the_io_priority_and_others_do_not() -> None:
    policy = TopologyAwarePolicy(topology=small(), config=TEST17)
    state = policy.initial_state()
    _, idle, _ = create(policy, state, ctr("c", qos=BE, ann={KEY: "idle"}))
    assert idle.linux.HasField("io_priority")
    io_class = getattr(idle.linux.io_priority, "class")  # a Python keyword
    assert api.IOPrioClass.Name(io_class) == "IOPRIO_CLASS_BE"
    assert idle.linux.io_priority.priority == 6
    _, rt, _ = create(policy, state, ctr("c", qos=BE, ann={KEY: "realtime"}))
    assert rt.linux.HasField("scheduler") and not rt.linux.HasField("io_priority")


def test_without_classes_the_adjustment_has_neither_field() -> None:
    policy = TopologyAwarePolicy(topology=small(), config={})
    _, adjust, _ = create(policy, policy.initial_state(), ctr("c", qos=BE))
    assert not adjust.linux.HasField("scheduler")
    assert not adjust.linux.HasField("io_priority")
    assert policy.scheduling.nri_requirements() == ()


def test_an_unknown_annotated_class_fails_the_container() -> None:
    policy = TopologyAwarePolicy(topology=small(), config=TEST17)
    c = ctr("web", pod="p", qos=BE, ann={f"{KEY}/pod": "turbo"})
    with pytest.raises(AnnotationError, match=r"pod default/p container web.*'turbo'.*idle"):
        policy.allocate(policy.initial_state(), c)


def test_requirements_name_fields_versions_and_classes() -> None:
    policy = TopologyAwarePolicy(topology=small(), config=TEST17)
    reqs = {r.field: r for r in policy.scheduling.nri_requirements()}
    assert reqs["LinuxScheduler"].since == (0, 11, 0)
    assert reqs["LinuxIOPriority"].since == (0, 10, 0)
    assert reqs["LinuxIOPriority"].classes == ("idle",)
    assert "NRI v0.11.0+" in reqs["LinuxScheduler"].describe()
    io_only = TopologyAwarePolicy(
        topology=small(),
        config={"schedulingClasses": [{"name": "bg", "ioClass": "idle"}]},
    )
    assert [r.field for r in io_only.scheduling.nri_requirements()] == ["LinuxIOPriority"]


def _config(*classes: Mapping[str, Any], **more: Any) -> dict[str, Any]:
    return {"schedulingClasses": list(classes), **more}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        pytest.param(
            _config({"name": "rt", "policy": "fifo"}),
            r"schedulingClasses\[rt\]: policy fifo needs a priority",
            id="fifo-without-priority",
        ),
        pytest.param(
            _config({"name": "rt", "policy": "rr", "priority": 100}),
            r"schedulingClasses\[rt\]\.priority: expected 1\.\.99 \(policy rr\), found 100",
            id="rr-priority-too-high",
        ),
        pytest.param(
            _config({"name": "p", "policy": "other", "priority": 30}),
            r"schedulingClasses\[p\]\.priority: expected 0 or unset for policy other .*, found 30",
            id="priority-with-other",
        ),
        pytest.param(
            _config({"name": "n", "nice": 20}),
            r"schedulingClasses\[n\]\.nice: expected -20\.\.19 \(nice\(2\)\), found 20",
            id="nice-out-of-range",
        ),
        pytest.param(
            _config({"name": "d", "policy": "deadline", "runtime": 10, "deadline": 5}),
            r"schedulingClasses\[d\]: expected runtime <= deadline <= period",
            id="deadline-order",
        ),
        pytest.param(
            _config({"name": "d", "policy": "deadline", "runtime": 10}),
            r"policy deadline needs runtime and deadline",
            id="deadline-missing",
        ),
        pytest.param(
            _config({"name": "d", "policy": "fifo", "priority": 1, "period": 10}),
            r"schedulingClasses\[d\]: period only apply to policy deadline",
            id="period-without-deadline",
        ),
        pytest.param(
            _config({"name": "io", "ioClass": "be", "ioPriority": 8}),
            r"schedulingClasses\[io\]\.ioPriority: expected 0\.\.7 \(ionice\(1\)\), found 8",
            id="io-priority",
        ),
        pytest.param(
            _config({"name": "a"}, {"name": "a"}),
            r"class 'a' is defined twice",
            id="duplicate",
        ),
        pytest.param(
            _config({"name": "a"}, namespaceSchedulingClasses={"batch": "b"}),
            r"namespaceSchedulingClasses\[batch\]: expected one of schedulingClasses \(a\), "
            "found 'b'",
            id="namespace-unknown-class",
        ),
        pytest.param(
            _config({"name": "a"}, podQoSSchedulingClasses={"Bursty": "a"}),
            r"podQoSSchedulingClasses: unknown key 'Bursty'; expected one of Guaranteed",
            id="qos-unknown-key",
        ),
        pytest.param(
            _config(podQoSSchedulingClasses={"besteffort": "x"}),
            r"podQoSSchedulingClasses\[besteffort\]: expected .*none defined\), found 'x'",
            id="qos-unknown-class",
        ),
        pytest.param(
            _config({"name": "f", "policy": "fifo", "priority": 1, "flags": ["turbo"]}),
            r"schedulingClasses\[0\]\.flags\[0\]: ",
            id="unknown-flag",
        ),
    ],
)
def test_config_errors(config: Mapping[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TopologyAwarePolicy(topology=small(), config=config)


def test_deadline_class_renders_its_parameters_and_flags() -> None:
    policy = TopologyAwarePolicy(
        topology=small(),
        config=_config(
            {
                "name": "dl",
                "policy": "deadline",
                "runtime": 1000,
                "deadline": 2000,
                "period": 4000,
                "flags": ["reset-on-fork", "dl-overrun"],
            }
        ),
    )
    _, adjust, _ = create(policy, policy.initial_state(), ctr("c", qos=BE, ann={KEY: "dl"}))
    s = adjust.linux.scheduler
    assert api.LinuxSchedulerPolicy.Name(s.policy) == "SCHED_DEADLINE"
    assert (s.runtime, s.deadline, s.period) == (1000, 2000, 4000)
    assert [api.LinuxSchedulerFlag.Name(f) for f in s.flags] == [
        "SCHED_FLAG_RESET_ON_FORK",
        "SCHED_FLAG_DL_OVERRUN",
    ]


# -- properties ---------------------------------------------------------------------------

_names = st.sampled_from(["a", "b", "c"])


@given(
    annotated=st.none() | _names,
    ns_default=st.none() | _names,
    qos_default=st.none() | _names,
    qos=st.sampled_from(list(QoSClass)),
)
def test_precedence_is_annotation_then_namespace_then_qos(
    annotated: str | None, ns_default: str | None, qos_default: str | None, qos: QoSClass
) -> None:
    classes = build_scheduling_classes(
        tuple(SchedulingClassSpec(name=n, nice=i) for i, n in enumerate("abc")),
        namespaces={"ns": ns_default} if ns_default else {},
        qos={qos.value.lower(): qos_default} if qos_default else {},
        subject="test",
    )
    c = ctr("c", ns="ns", qos=qos, ann={KEY: annotated} if annotated else None)
    want = annotated or ns_default or qos_default
    got = classes.resolve(c)
    assert (got.name if got else None) == want


_specs = st.builds(
    SchedulingClass,
    name=st.just("x"),
    policy=st.none() | st.sampled_from(list(SchedPolicy)),
    priority=st.none() | st.integers(0, 99),
    nice=st.none() | st.integers(-20, 19),
    flags=st.lists(st.sampled_from(list(SchedFlag)), unique=True).map(tuple),
    runtime=st.none() | st.integers(0, 2**40),
    deadline=st.none() | st.integers(0, 2**40),
    period=st.none() | st.integers(0, 2**40),
    io_class=st.none() | st.sampled_from(list(IOClass)),
    io_priority=st.none() | st.integers(0, 7),
)


@given(_specs)
def test_the_adjustment_carries_exactly_what_the_class_sets(sc: SchedulingClass) -> None:
    a = Assignment(ContainerID("c"), IDSet(), IDSet(), CPUKind.NONE, scheduling=sc)
    linux = adjustment_for(a).linux
    assert linux.HasField("scheduler") is sc.sets_scheduler
    assert linux.HasField("io_priority") is sc.sets_io_priority
    if sc.sets_scheduler:
        s = linux.scheduler
        assert api.LinuxSchedulerPolicy.Name(s.policy) == f"SCHED_{(sc.policy or 'none').upper()}"
        assert (s.priority, s.nice) == (sc.priority or 0, sc.nice or 0)
        assert (s.runtime, s.deadline, s.period) == (
            sc.runtime or 0,
            sc.deadline or 0,
            sc.period or 0,
        )
        assert len(s.flags) == len(sc.flags)
    if sc.sets_io_priority:
        assert linux.io_priority.priority == (sc.io_priority or 0)
