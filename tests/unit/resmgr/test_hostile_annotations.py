"""Hostile values of the topology-aware policy's other new inputs: ``prefer-cpu-priority``,
``require-isolated-cpus``, ``scheduling-class``, the topology hint annotations, and the
``schedulingClasses`` configuration.

Each must end in a value or a clean error (`AnnotationError` / `ConfigError`) that names
the subject and what was expected, quotes what was found cut to a prefix (a 300 KB value
is named, not copied into the log and the RPC reply), and comes within a bounded work.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_resmgr.model import AnnotationError, ConfigError, ContainerInfo, QoSClass
from nri_resmgr.policy.sched_classes import SCHEDULING_CLASS_ANNOTATION
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.policy.topology_aware.hints import (
    PICK_BY_HINTS,
    STRICT_HINTS,
    TEST_HINTS,
    TOPOLOGY_HINTS,
    container_hints,
)
from nri_resmgr.policy.topology_aware.preferences import REQUIRE_ISOLATED
from nri_resmgr.policy.topology_aware.priority import (
    PREFER_CPU_PRIORITY,
    CPUPriority,
    parse_cpu_priority,
)
from nri_resmgr.runtime.adjustments import io_priority_for, scheduler_for
from tests.support.builders import ctr, small
from tests.support.hostile import reader_work_bound
from tests.support.work import counting_calls

HUGE = "x" * 300 * 1024
CLASSES = {"schedulingClasses": [{"name": "idle", "policy": "idle"}]}


def _allocate(ann: dict[str, str]) -> None:
    p = TopologyAwarePolicy(topology=small(), config=CLASSES)
    p.allocate(p.initial_state(), ctr("c0", pod="p", milli=2000, ann=ann))


def _hints(ann: dict[str, str]) -> None:
    container_hints(ctr("c0", pod="p", milli=1000, ann=ann), small())


@pytest.mark.parametrize(
    ("key", "call"),
    [
        (PREFER_CPU_PRIORITY, _allocate),
        (SCHEDULING_CLASS_ANNOTATION, _allocate),
        (REQUIRE_ISOLATED, _allocate),
        (TOPOLOGY_HINTS, _hints),
        (STRICT_HINTS, _hints),
        (PICK_BY_HINTS, _hints),
        (TEST_HINTS, _hints),
    ],
)
def test_a_huge_value_is_named_not_copied(key: str, call: Callable[[dict[str, str]], None]) -> None:
    with pytest.raises(AnnotationError) as err:
        call({key: HUGE})
    text = str(err.value)
    assert text.startswith("pod default/p container c0: "), text[:200]
    assert key in text and "expected" in text, text[:300]
    assert len(text) < 1000, f"{len(text)} characters: {text[:300]}"


def test_an_alias_bomb_in_test_hints_fails_quickly() -> None:
    """Within the 16 KiB the annotation may have, aliases repeat to 200**3 values; the
    reader refuses them within a work bound linear in the value's size."""
    n = 200
    text = (
        "z: {Provider: &a [" + ",".join(["0"] * n) + "], "
        "Sockets: &b [" + ",".join(["*a"] * n) + "], "
        "CPUs: [" + ",".join(["*b"] * n) + "]}"
    )
    with (
        counting_calls(limit=reader_work_bound(text), what="the alias bomb"),
        pytest.raises(AnnotationError, match="expected no aliases"),
    ):
        _hints({TEST_HINTS: text})


@pytest.mark.parametrize("text", ["\x00", "a: {CPUs: 0}\n\x07", "\ufffe"])
def test_test_hints_with_characters_yaml_refuses_fail_cleanly(text: str) -> None:
    """The loader refused them when it was made, outside the handler: a ReaderError
    reached the pipeline (found by tests/fuzz/test_annotation_fuzz.py)."""
    with pytest.raises(AnnotationError, match="expected YAML"):
        _hints({TEST_HINTS: text})


def test_a_deadline_class_beyond_the_kernel_range_is_a_config_error() -> None:
    """It was accepted, and every container of the class then failed with an internal
    error: the 64-bit NRI field refused 2**64 when the adjustment was built."""
    for value in (1 << 63, 1 << 64):
        spec = {"name": "dl", "policy": "deadline", "runtime": 1, "deadline": value}
        problem = r"schedulingClasses\[0\]\.deadline: expected less than"
        with pytest.raises(ConfigError, match=problem):
            TopologyAwarePolicy(topology=small(), config={"schedulingClasses": [spec]})


_text = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["high", " HIGH ", "default", "Low", "normal", "none", "\u0663", ""]
)


def _guaranteed(key: str, value: str) -> ContainerInfo:
    return ctr("c0", pod="p", milli=1000, qos=QoSClass.GUARANTEED, ann={key: value})


@settings(max_examples=300, deadline=None)
@given(value=_text)
def test_cpu_priority_parses_or_fails_cleanly(value: str) -> None:
    try:
        got = parse_cpu_priority(_guaranteed(PREFER_CPU_PRIORITY, value), CPUPriority.NONE)
    except AnnotationError as exc:
        assert PREFER_CPU_PRIORITY in str(exc) and "expected one of" in str(exc)
        return
    assert got.value == (value.strip().lower() if value.strip().lower() != "default" else "none")


@settings(max_examples=300, deadline=None)
@given(value=_text | st.sampled_from(["devices,mounts", "all", "none,devices", "true", "f"]))
def test_topology_hint_types_parse_or_fail_cleanly(value: str) -> None:
    try:
        container_hints(_guaranteed(TOPOLOGY_HINTS, value), small())
    except AnnotationError as exc:
        assert "expected true, false or a list of" in str(exc)


_ids = st.sampled_from(["0", "0-3", "1,5", "99", "-1", "0-4294967295", "a", "", "\u0663"])
_hint = st.fixed_dictionaries(
    {},
    optional={
        "CPUs": _ids | st.lists(_ids, max_size=3),
        "NUMAs": _ids,
        "Sockets": _ids,
        "Provider": _text,
        "Extra": _ids,
    },
)


@settings(max_examples=300, deadline=None)
@given(doc=st.dictionaries(_text, _hint | _text, max_size=3), strict=st.booleans())
def test_test_hints_parse_or_fail_cleanly(doc: dict[str, object], strict: bool) -> None:
    import json

    ann = {TEST_HINTS: json.dumps(doc), STRICT_HINTS: str(strict).lower()}
    topology = small()
    try:
        got = container_hints(_guaranteed(TEST_HINTS, ann[TEST_HINTS]), topology)
    except AnnotationError as exc:
        assert str(exc).startswith("pod default/p container c0: annotation ")
        return
    for h in got.hints:
        assert set(h.cpus) <= set(topology.cpus) and set(h.nodes) <= set(topology.nodes)


@settings(max_examples=200, deadline=None)
@given(value=_text | st.sampled_from(["idle", " idle ", "IDLE", "rt"]))
def test_scheduling_class_names_resolve_or_fail_cleanly(value: str) -> None:
    p = TopologyAwarePolicy(topology=small(), config=CLASSES)
    c = _guaranteed(SCHEDULING_CLASS_ANNOTATION, value)
    try:
        got = p.scheduling.resolve(c)
    except AnnotationError as exc:
        assert "expected one of schedulingClasses (idle)" in str(exc)
        return
    assert got is not None and got.name == value.strip() == "idle"


_number = st.integers(-(2**65), 2**65) | st.none()
_spec = st.fixed_dictionaries(
    {"name": _text},
    optional={
        "policy": st.sampled_from(["fifo", "rr", "other", "batch", "idle", "deadline", "x"]),
        "priority": _number,
        "nice": _number,
        "runtime": _number,
        "deadline": _number,
        "period": _number,
        "ioClass": st.sampled_from(["rt", "be", "idle", "none", "x"]),
        "ioPriority": _number,
        "flags": st.lists(st.sampled_from(["reset-on-fork", "x"]), max_size=2),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(_spec, max_size=3),
    namespaces=st.dictionaries(_text, _text, max_size=2),
    qos=st.dictionaries(st.sampled_from(["BestEffort", "burstable", "Nope"]), _text, max_size=2),
)
def test_scheduling_class_configs_build_or_fail_cleanly(
    specs: list[dict[str, object]], namespaces: dict[str, str], qos: dict[str, str]
) -> None:
    """Whatever builds also renders: every class fits NRI's adjustment fields."""
    config = {
        "schedulingClasses": specs,
        "namespaceSchedulingClasses": namespaces,
        "podQoSSchedulingClasses": qos,
    }
    try:
        p = TopologyAwarePolicy(topology=small(), config=config)
    except ConfigError as exc:
        assert str(exc).startswith("policy topology-aware"), str(exc)
        assert len(str(exc)) < 2000, str(exc)
        return
    for sc in p.scheduling.by_name.values():
        if sc.sets_scheduler:
            scheduler_for(sc)
        if sc.sets_io_priority:
            io_priority_for(sc)
