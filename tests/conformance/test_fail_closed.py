"""Failing closed through the real NRI library: `enable-nri --require` and the default validator.

The configuration `nri-resmgr enable-nri --require` writes for containerd is read back
with tomllib and its `default_validator` table handed to the fake runtime, which keys it by
the library's own TOML tags (an unknown key is an error): so the names we write are the
names NRI reads. Then, on the releases that have the validator (NRI v0.10+: containerd
2.2+), a container created while the daemon is away is refused with the validator's reason,
a pod carrying the tolerate annotation is not, and a container created once the daemon is
back is placed. On a release without it (v0.8.0: containerd 1.7.26+, 2.0, 2.1) the same
container is created unplaced and only the daemon's next Synchronize moves it: the
behaviour docs/operations.md describes for those runtimes.
"""

from __future__ import annotations

import signal
import tomllib
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.cli import main
from nri_resmgr.ops.runtime_config import NRI_TABLE, TOLERATE_ANNOTATION
from tests.conformance.harness import GoRuntime, Json, RuntimeCallError, prune_empty
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.test_daemon import NAME, attach_daemon, cpus, diagnostics, guaranteed
from tests.support.waiting import wait_for

pytestmark = pytest.mark.conformance

WITH_VALIDATOR = ["v0.11.0", "v0.12.2"]
REFUSED = f'validation error: required plugin "{NAME}" not present'


def required_table(tmp: Path) -> dict[str, Any]:
    """The default_validator table `enable-nri --require` writes into a containerd config."""
    config = tmp / "config.toml"
    assert main(["enable-nri", "--runtime", "containerd", "--config", str(config),
                 "--require", "--plugin-name", NAME]) == 0
    table: dict[str, Any] = tomllib.loads(config.read_text())["plugins"][NRI_TABLE][
        "default_validator"]
    return table


def refusal(rt: GoRuntime, pod: Json, container: Json) -> str:
    with pytest.raises(RuntimeCallError) as failed:
        rt.create_container(pod, container)
    return failed.value.message


@pytest.mark.parametrize("nri_version", WITH_VALIDATOR, indirect=True)
def test_required_plugin_refuses_creation_while_the_daemon_is_away(
    runtime: GoRuntime, tmp_path: Path
) -> None:
    runtime.start(default_validator=required_table(tmp_path))
    db = make_pod(name="db-0", qos="guaranteed")
    runtime.run_pod(db)

    # No daemon yet: refused with the validator's reason, so nothing runs unplaced.
    assert REFUSED in refusal(runtime, db, guaranteed(db, "early", 2))

    # The daemon's own pod carries the tolerate annotation and is created without it.
    own = make_pod(name="nri-resmgr-x", namespace="kube-system", qos="burstable",
                   annotations={TOLERATE_ANNOTATION: "true"})
    runtime.run_pod(own)
    assert "adjust" not in prune_empty(
        runtime.create_container(own, make_container(own, name="nri-resmgr")))

    attach_daemon(runtime, mode="external", start=False)
    first_ctr = guaranteed(db, "pg", 2)
    first = runtime.create_container(db, first_ctr)
    assert cpus(first) == "1,5", diagnostics(runtime)

    # kill -9. NRI marks the plugin closed when the connection drops but removes it only
    # after the next event, and CreateContainer lists every plugin for the validator before
    # calling it: so the first creation after the death still passes, unplaced (NRI
    # v0.10-v0.12.2, adaptation.go CreateContainer/removeClosedPlugins). Every later one
    # is refused; the daemon's Synchronize places the one that slipped through.
    [daemon] = runtime.externals
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(timeout=30)
    wait_for(
        lambda: any("closed" in line for line in runtime.logs()),
        what="the runtime noticing the closed connection",
        timeout=20,
        interval=0.05,
    )
    slipped = guaranteed(db, "slipped", 1)
    assert "adjust" not in prune_empty(runtime.create_container(db, slipped))
    retried = guaranteed(db, "retry", 1)
    assert REFUSED in refusal(runtime, db, retried)

    # Back again (state restored from its snapshot): the slipped container is moved off the
    # shared CPUs and the kubelet's retry is placed.
    runtime.externals.clear()
    running = [{**c, "state": "CONTAINER_RUNNING"} for c in (first_ctr, slipped)]
    runtime.set_state(pods=[db], containers=running)
    sync = attach_daemon(runtime, mode="external", start=False)
    assert sync is not None
    moved = {u["container_id"]: u["linux"]["resources"]["cpu"]["cpus"]
             for u in prune_empty({"u": sync.updates})["u"]}
    # (the fake runtime reports containers with their original resources, so pg's CPUs are
    # asserted again: the same ones)
    assert moved == {first_ctr["id"]: "1,5", slipped["id"]: "4"}, diagnostics(runtime)
    placed = runtime.create_container(db, retried)
    assert cpus(placed) == "2", diagnostics(runtime)


@pytest.mark.parametrize("nri_version", ["v0.8.0"], indirect=True)
def test_without_the_validator_a_container_runs_unplaced_until_synchronize(
    runtime: GoRuntime, tmp_path: Path
) -> None:
    """What containerd 1.7, 2.0 and 2.1 do with the same configuration (docs say so)."""
    with pytest.raises(RuntimeCallError, match="has no default validator"):
        runtime.start(default_validator=required_table(tmp_path))
    runtime.start()
    db = make_pod(name="db-0", qos="guaranteed")
    runtime.run_pod(db)
    early = guaranteed(db, "early", 2)
    assert "adjust" not in prune_empty(runtime.create_container(db, early))

    running = {**early, "state": "CONTAINER_RUNNING"}
    runtime.set_state(pods=[db], containers=[running])
    sync = attach_daemon(runtime, mode="external", start=False)
    assert sync is not None
    moved = [(u["container_id"], u["linux"]["resources"]["cpu"]["cpus"])
             for u in prune_empty({"u": sync.updates})["u"]]
    assert moved == [(early["id"], "1,5")], diagnostics(runtime)
