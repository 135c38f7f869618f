"""Conflicting adjustments from two plugins, judged by the real NRI runtime library.

The runtime lets one plugin own each adjusted unit; a second claim fails the
CreateContainer with a version-specific text (NRI-FACTS §5): up to v0.9 a human
subject ("CPU pinning", "annotation KEY"), from v0.10 the `Field` enum name
("CPUSetCPUs " with a trailing space for simple fields, "Annotations KEY").
The claimer named first is the later plugin in index order.
"""

from __future__ import annotations

import pytest

from tests.conformance.harness import GoRuntime, RuntimeCallError, prune_empty
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.plugins import add_external_recorder, attach_recorder
from tests.conformance.plugins.recorder import CPUSET_ANNOTATION, RECORDED_BY_ANNOTATION

pytestmark = pytest.mark.conformance


def cpuset_subject(version: str) -> str:
    return "CPUSetCPUs " if version_key(version) >= (0, 10, 0) else "CPU pinning"


def annotation_subject(version: str, key: str) -> str:
    kind = "Annotations" if version_key(version) >= (0, 10, 0) else "annotation"
    return f"{kind} {key}"


@pytest.mark.parametrize("go_idx", ["20", "05"], ids=["go-after", "go-before"])
def test_cpuset_conflict_python_and_go(runtime: GoRuntime, mode: str, go_idx: str) -> None:
    rec = attach_recorder(runtime, mode=mode)
    runtime.go_plugin(name="gopin", idx=go_idx, behaviour="cpuset", cpus="4-5")
    runtime.wait_synced()
    pod = make_pod(name="web-0")
    ctr = make_container(pod, name="app", annotations={CPUSET_ANNOTATION.format(name="app"): "2-3"})

    with pytest.raises(RuntimeCallError) as err:
        runtime.create_container(pod, ctr)

    first, second = ("10-recorder", f"{go_idx}-gopin")
    if go_idx == "05":
        first, second = second, first
    assert err.value.message == (
        f'plugins "{second}" and "{first}" both tried to set {cpuset_subject(runtime.version)}'
    )
    # Both plugins were asked (the conflict is found after the later one replied).
    assert rec.events(lifecycle_only=True) == [("CREATE_CONTAINER", pod["id"], ctr["id"])]
    assert runtime.go_plugin_events("gopin")[-1]["event"] == "CREATE_CONTAINER"


def test_no_conflict_when_only_one_sets_cpuset(runtime: GoRuntime, mode: str) -> None:
    attach_recorder(runtime, mode=mode)
    runtime.go_plugin(name="gopin", idx="20", behaviour="cpuset", cpus="4-5")
    runtime.wait_synced()
    pod = make_pod(name="web-0")

    created = runtime.create_container(pod, make_container(pod, name="app"))

    assert prune_empty(created)["adjust"]["linux"] == {"resources": {"cpu": {"cpus": "4-5"}}}


def test_annotation_conflict_between_two_python_plugins(runtime: GoRuntime, mode: str) -> None:
    attach_recorder(runtime, mode=mode)
    add_external_recorder(runtime, idx="20", name="second", events=["CREATE_CONTAINER"])
    pod = make_pod(name="web-0")

    with pytest.raises(RuntimeCallError) as err:
        runtime.create_container(pod, make_container(pod, name="app"))

    subject = annotation_subject(runtime.version, RECORDED_BY_ANNOTATION)
    assert err.value.message == f'plugins "20-second" and "10-recorder" both tried to set {subject}'
