"""Errors, large replies and timeouts through the real NRI runtime library, per version.

* a hook exception reaches the runtime with its message, and the plugin stays
  connected;
* a reply larger than the 4096-byte ttrpc buffer (200 env vars) arrives whole;
* a reply later than the request timeout either disconnects the plugin (the
  request proceeds without it) or fails the request, depending on a race (see the
  test).
"""

from __future__ import annotations

import pytest

from tests.conformance.harness import GoRuntime, RuntimeCallError
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.plugins import RECORDER, attach_recorder
from tests.conformance.plugins.recorder import (
    BIG_ENV_COUNT,
    BIG_NAME,
    FAIL_NAME,
    RECORDED_BY_ENV,
    SLOW_NAME,
    big_env,
    fail_message,
)

pytestmark = pytest.mark.conformance

# How ttrpc's client renders a status the plugin returned (UNKNOWN for a plain exception).
STATUS_PREFIX = "rpc error: code = Unknown desc = "


def test_handler_error_reaches_runtime(runtime: GoRuntime, mode: str) -> None:
    rec = attach_recorder(runtime, mode=mode)
    pod = make_pod(name="web-0")
    bad = make_container(pod, name=FAIL_NAME)
    good = make_container(pod, name="app")

    with pytest.raises(RuntimeCallError) as err:
        runtime.create_container(pod, bad)

    assert err.value.message == STATUS_PREFIX + fail_message("10-recorder")
    # Not fatal: the plugin stays connected and handles the next request.
    created = runtime.create_container(pod, good)
    assert created["adjust"]["env"] == [{"key": RECORDED_BY_ENV, "value": "10-recorder"}]
    assert rec.events(lifecycle_only=True) == [
        ("CREATE_CONTAINER", pod["id"], bad["id"]),
        ("CREATE_CONTAINER", pod["id"], good["id"]),
    ]
    assert [r["event"] for r in rec.records()].count("CLOSED") == 0


def test_go_stub_handler_error_reaches_runtime(runtime: GoRuntime) -> None:
    """Reference: the Go stub's error arrives with the same status rendering."""
    runtime.start()
    runtime.go_plugin(name="gofail", idx="10", behaviour="fail")
    runtime.wait_synced()
    pod = make_pod(name="web-0")
    with pytest.raises(RuntimeCallError) as err:
        runtime.create_container(pod, make_container(pod, name=FAIL_NAME))
    assert err.value.message == STATUS_PREFIX + "go plugin gofail refuses container fail-me"


def test_reply_larger_than_4096_bytes(runtime: GoRuntime, mode: str) -> None:
    attach_recorder(runtime, mode=mode)
    pod = make_pod(name="web-0")

    created = runtime.create_container(pod, make_container(pod, name=BIG_NAME))

    env = created["adjust"]["env"]
    expected = [{"key": RECORDED_BY_ENV, "value": "10-recorder"}] + [
        dict(zip(("key", "value"), big_env(i), strict=True)) for i in range(BIG_ENV_COUNT)
    ]
    assert env == expected
    assert sum(len(e["key"]) + len(e["value"]) for e in env) > 4096
    # The connection survived: a normal request still works.
    again = runtime.create_container(pod, make_container(pod, name="small"))
    assert again["adjust"]["env"] == [{"key": RECORDED_BY_ENV, "value": "10-recorder"}]


def test_reply_after_request_timeout(runtime: GoRuntime, mode: str) -> None:
    """A hook slower than the request timeout: the runtime's own timer wins, always.

    The runtime closes the plugin and the request proceeds without it (fail open), as
    with a Go stub, whose handlers run past their context. nri_api's trunk tells the hook
    the deadline but cuts it off only a grace period later, so it never answers
    DEADLINE_EXCEEDED first (that would be an ordinary error status, failing the CRI
    request instead, depending on a race).
    """
    rec = attach_recorder(runtime, mode=mode, request_timeout_ms=500, slow_seconds=3)
    pod = make_pod(name="web-0")
    later = make_container(pod, name="later")

    slow = runtime.create_container(pod, make_container(pod, name=SLOW_NAME))
    assert "env" not in slow.get("adjust", {})
    closing = [line for line in runtime.logs() if "closing plugin" in line]
    assert closing == [
        "error: closing plugin 10-recorder, failed to handle CreateContainer request: "
        "context deadline exceeded"
    ]
    assert "env" not in runtime.create_container(pod, later).get("adjust", {})
    assert ("CREATE_CONTAINER", pod["id"], later["id"]) not in rec.events()


@pytest.mark.parametrize(
    ("script", "expected_error"),
    [
        ("exit 1", "failed to register plugin, connection closed"),
        ("exec /bin/sleep 60", "plugin registration timed out"),
    ],
    ids=["exits-at-once", "never-registers"],
)
def test_broken_preregistered_plugin(
    runtime: GoRuntime, script: str, expected_error: str
) -> None:
    """Up to NRI v0.6 one broken pre-registered plugin fails the whole start (and with
    it NRI in containerd 1.7.0-1.7.25); from v0.8 it is skipped and the rest works."""
    broken = runtime.plugin_dir / "05-broken"
    broken.write_text(f"#!/bin/sh\n{script}\n")
    broken.chmod(0o755)
    runtime.install_preregistered(RECORDER, idx="10", name="recorder", config="{}")

    if version_key(runtime.version) < (0, 8, 0):
        with pytest.raises(RuntimeCallError) as err:
            runtime.start(registration_timeout_ms=4000)
        assert err.value.message == expected_error
        return

    startup = runtime.start(registration_timeout_ms=4000)
    assert startup is not None
    pod = make_pod(name="web-0")
    created = runtime.create_container(pod, make_container(pod, name="app"))
    assert created["adjust"]["env"] == [{"key": RECORDED_BY_ENV, "value": "10-recorder"}]
    assert any(
        line.startswith('warn: failed to start pre-installed NRI plugin "broken"')
        for line in runtime.logs()
    )
