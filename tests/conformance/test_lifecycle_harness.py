"""The fake runtime itself: protocol errors and per-version message types.

These keep the harness honest: a field or an operation the NRI version does not
have must fail loudly rather than be dropped, so no test passes by accident.
"""

from __future__ import annotations

import pytest

from tests.conformance.harness import GoRuntime, RuntimeCallError, prune_empty
from tests.conformance.harness_build import VERSIONS, version_key
from tests.conformance.harness_pods import make_container, make_pod

pytestmark = pytest.mark.conformance


def test_reports_its_nri_version(runtime: GoRuntime) -> None:
    assert runtime.nri_version() == runtime.version
    assert runtime.version in VERSIONS


def test_events_need_a_started_runtime(runtime: GoRuntime) -> None:
    pod = make_pod(name="web-0")
    with pytest.raises(RuntimeCallError) as err:
        runtime.run_pod(pod)
    assert err.value.message == 'harness: op "run_pod" needs a started runtime (send start first)'


def test_unknown_op(runtime: GoRuntime) -> None:
    runtime.start()
    with pytest.raises(RuntimeCallError) as err:
        runtime.call("frobnicate")
    assert err.value.message == 'harness: unknown op "frobnicate"'


def test_fields_are_checked_against_the_version_schema(runtime: GoRuntime) -> None:
    """PodSandbox.ips exists from v0.8.0; older versions must refuse it."""
    runtime.start()
    pod = {**make_pod(name="web-0"), "ips": ["10.0.0.7"]}
    if version_key(runtime.version) >= (0, 8, 0):
        runtime.run_pod(pod)
        return
    with pytest.raises(RuntimeCallError) as err:
        runtime.run_pod(pod)
    assert err.value.message.startswith("harness: cannot decode pod for this NRI version: ")
    assert '"ips"' in err.value.message


def test_update_pod_only_where_it_exists(runtime: GoRuntime) -> None:
    runtime.start()
    pod = make_pod(name="web-0")
    if version_key(runtime.version) >= (0, 10, 0):
        assert runtime.update_pod(pod, linux_resources={"cpu": {"cpus": "0-3"}}) == {}
        return
    with pytest.raises(RuntimeCallError) as err:
        runtime.update_pod(pod)
    assert err.value.message == (
        f'harness: op "update_pod" is not supported by NRI {runtime.version}'
    )


def test_start_twice_and_stop_without_start(runtime: GoRuntime) -> None:
    with pytest.raises(RuntimeCallError) as err:
        runtime.stop()
    assert err.value.message == "harness: runtime not started"
    runtime.start()
    with pytest.raises(RuntimeCallError) as err:
        runtime.start()
    assert err.value.message == "harness: runtime already started (send stop first)"
    assert runtime.stop() == 0


def test_kubelet_like_objects_are_accepted(runtime: GoRuntime) -> None:
    """make_pod/make_container only use fields every version has."""
    pods = [make_pod(name=f"p-{qos}", qos=qos) for qos in ("guaranteed", "burstable", "besteffort")]
    ctrs = [
        make_container(
            p, name="c", cpu_request_millis=250, cpu_limit_millis=500, memory_limit=1 << 28
        )
        for p in pods
    ]
    runtime.start(pods=pods, containers=ctrs)
    for p, c in zip(pods, ctrs, strict=True):
        runtime.run_pod(p)
        # No plugin: nothing adjusted, only the library's empty sub-messages.
        assert prune_empty(runtime.create_container(p, c)) == {}
