"""The collector around the daemon's start-up (`nri_resmgr.ops.collector`).

Freezing is process-wide and cannot be undone for the objects it moved, so the tests
that reach `settle` run a fresh interpreter; the others restore the collector's state.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.ops import collector
from tests.support.requirements import REPO, require_sysfs


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        collector.resume()
        if not was:
            gc.disable()


def _python(code: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NRI_", "NODE_NAME"))}
    env.update(NRI_PLUGIN_NAME="resmgr", NRI_PLUGIN_IDX="90")
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()[-1]


def test_pause_then_resume_turns_it_back_on_without_freezing(collector_on: None) -> None:
    frozen = gc.get_freeze_count()
    collector.pause()
    assert not gc.isenabled()
    collector.resume()
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_a_collector_that_was_off_stays_off(collector_on: None) -> None:
    gc.disable()
    collector.pause()
    collector.resume()
    collector.settle()  # nothing of ours to settle: no freeze either
    assert not gc.isenabled()


def test_a_command_that_fails_at_start_up_leaves_the_collector_on(
    collector_on: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.yaml"
    assert main(["run", "--config", str(missing), "--state-dir", str(tmp_path)]) == 2
    assert str(missing) in capsys.readouterr().err
    assert gc.isenabled()


def test_settle_freezes_what_is_alive_and_turns_the_collector_on() -> None:
    code = (
        "import gc, json\n"
        "from nri_resmgr.ops import collector\n"
        "collector.pause()\n"
        "kept = [[i] for i in range(1000)]\n"
        "paused = not gc.isenabled()\n"
        "collector.settle()\n"
        "print(json.dumps([paused, gc.isenabled(), gc.get_freeze_count()]))\n"
    )
    paused, enabled, frozen = json.loads(_python(code))
    assert paused and enabled
    assert frozen >= 1000


#: the launcher's path up to connecting, with serve() probed (as test_startup_imports)
_AT_CONNECT = """
import gc, json, sys
import nri_api.stub

async def probe(self):
    print(json.dumps([gc.isenabled(), gc.get_freeze_count(), gc.get_stats()[0]["collections"]]))
    return 0

nri_api.stub.Plugin.serve = probe
from nri_resmgr.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_daemon_connects_with_its_start_up_frozen_and_the_collector_on(
    tmp_path: Path,
) -> None:
    require_sysfs()
    enabled, frozen, young = json.loads(
        _python(
            _AT_CONNECT, "run", "--log-file", str(tmp_path / "log"), "--state-dir", str(tmp_path)
        )
    )
    assert enabled
    # the daemon's modules, models, policy and pipeline: tens of thousands of objects
    assert frozen > 20_000
    # what ran before `cli.main` paused it (interpreter start, the probe's nri_api.stub)
    # only: an unpaused start-up runs over 100 young collections
    assert young < 60


def test_building_freezes_what_it_built_and_turns_the_collector_back_on() -> None:
    code = (
        "import gc, json\n"
        "from nri_resmgr.ops import collector\n"
        "gc.enable()\n"
        "young = gc.get_stats()[0]['collections']\n"
        "with collector.building():\n"
        "    off = not gc.isenabled()\n"
        "    kept = [[i] for i in range(10_000)]\n"
        "    ran = gc.get_stats()[0]['collections'] - young\n"
        "print(json.dumps([off, ran, gc.isenabled(), gc.get_freeze_count()]))\n"
    )
    off, ran, enabled, frozen = json.loads(_python(code))
    # 10,000 lists would have run over a dozen young collections with the collector on
    assert off and ran == 0
    assert enabled
    assert frozen >= 10_000


def test_building_that_fails_freezes_nothing(collector_on: None) -> None:
    frozen = gc.get_freeze_count()
    with pytest.raises(ValueError, match="the block's own"), collector.building():
        assert not gc.isenabled()
        raise ValueError("the block's own")
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_building_leaves_a_collector_that_was_off_off(collector_on: None) -> None:
    frozen = gc.get_freeze_count()
    gc.disable()
    with collector.building():
        pass
    assert not gc.isenabled()
    assert gc.get_freeze_count() == frozen


#: the daemon's Synchronize with the pipeline's probed: the collector's state inside it
_SYNCHRONIZE = """
import asyncio, gc, json
from tests.support.daemon import MACHINE, STATIC, discovered, resmgr_plugin
plugin = resmgr_plugin(STATIC, discovered(MACHINE))
inside = []
real = plugin.pipeline.synchronize
def probe(pods, containers):
    inside.append(gc.isenabled())
    return real(pods, containers)
plugin.pipeline.synchronize = probe
gc.enable()
frozen = gc.get_freeze_count()
asyncio.run(plugin.synchronize([], []))
print(json.dumps([inside, gc.isenabled(), gc.get_freeze_count() - frozen]))
"""


def test_the_daemon_synchronizes_building() -> None:
    inside, enabled, frozen = json.loads(_python(_SYNCHRONIZE))
    assert inside == [False]
    assert enabled
    assert frozen > 0
