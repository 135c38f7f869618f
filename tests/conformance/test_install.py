"""`nri-resmgr install` output launched by the real NRI adaptation, on every version.

The launcher and the conf.d file are written by the real `install` command into the
harness runtime's plugin and config directories. The adaptation then starts the launcher
itself (empty environment but the NRI variables, socket on fd 3, stdout/stderr discarded)
with the default 5 s registration timeout. The config file's policy (static, CPU 0
reserved) reaches the daemon only through Configure, so the exact cpuset proves it arrived.
`uninstall` then stops the launched instance and resets the container over the runtime's
socket (issue 10 item 11).
"""

from __future__ import annotations

import json

import pytest

from nri_resmgr.cli import main
from nri_resmgr.ops.install import find_launched
from nri_resmgr.topology.synthetic import write_sysfs
from tests.conformance.harness import GoRuntime, prune_empty
from tests.conformance.harness_pods import make_container, make_pod

pytestmark = pytest.mark.conformance

SPEC = {"packages": 1, "dies": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "4G"}


def test_installed_launcher_registers_and_gets_its_config(runtime: GoRuntime) -> None:
    root = runtime.dir / "root"
    write_sysfs(SPEC, root)
    log = runtime.dir / "daemon.log"
    config = runtime.dir / "resmgr.yaml"
    config.write_text(json.dumps({
        "policy": "static",
        "policyConfig": {"reservedSystemCPUs": "0"},
        "log": {"level": "debug", "format": "json", "file": str(log)},
    }))
    assert main(["install", "--index", "90", "--root", str(runtime.dir), "--config",
                 str(config), "--log-file", str(log),
                 f"--run-arg=--sysfs-root={root}",
                 f"--run-arg=--state-dir={runtime.dir / 'state'}"]) == 0
    launcher = runtime.dir / "opt/nri/plugins/90-resmgr"
    assert launcher.exists()
    sync = runtime.start()  # default registration timeout: 5 s
    if sync is not None:  # NRI >= v0.8 synchronizes pre-registered plugins at start
        assert sync.updates == []
    db = make_pod(name="db-0", qos="guaranteed")
    pg = make_container(db, name="postgres", cpu_request_millis=2000, cpu_limit_millis=2000,
                        memory_limit=256 << 20)
    runtime.run_pod(db)
    reply = prune_empty(runtime.create_container(db, pg))
    text = log.read_text() if log.exists() else "(no log)"
    assert reply["adjust"]["linux"]["resources"]["cpu"]["cpus"] == "1,5", text[-3000:]
    assert '"configuration from the runtime applied"' in text or \
        "configuration from the runtime applied" in text
    # uninstall: the launched instance is stopped, then `reset` (an external plugin of the
    # same runtime) sends the pinned container back to the whole machine
    placed = make_container(db, name="postgres", id=pg["id"], cpu_request_millis=2000,
                            cpu_limit_millis=2000, memory_limit=256 << 20,
                            state="CONTAINER_RUNNING", cpuset_cpus="1,5")
    runtime.set_state(pods=[db], containers=[placed])
    assert len(find_launched(launcher)) == 1  # the instance the runtime started
    runtime.updates()  # forget anything sent before
    assert main(["uninstall", "--index", "90", "--root", str(runtime.dir),
                 f"--reset-arg=--socket={runtime.socket}", f"--reset-arg=--sysfs-root={root}",
                 f"--reset-arg=--state-dir={runtime.dir / 'state'}"]) == 0
    assert not launcher.exists()
    assert find_launched(launcher) == []
    updates = [u for call in runtime.updates() for u in call]
    assert [(u["container_id"], u["linux"]["resources"]["cpu"]["cpus"],
             u["linux"]["resources"]["cpu"]["mems"]) for u in updates] == [(pg["id"], "0-7", "0")]
