"""What `nri-resmgr run` imports before it connects to the runtime.

A pre-registered plugin must register within the runtime's registration timeout (5 s by
default) of being started, on a node that may be busy, and the daemon's start is mostly
imports.  These tests pin the imports that were made lazy: each runs a fresh interpreter
the way the launcher does (`main(["run", ...])`) with `Plugin.serve` replaced by a probe
that prints `sys.modules` at the moment the daemon would connect, so moving one of these
imports back to module level fails here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.requirements import REPO, require_sysfs

#: the launcher's path up to connecting: cli.main(["run", ...]) with serve() probed
_PROBE = """
import json, sys
import nri_api.stub

async def probe(self):
    print(json.dumps(sorted(sys.modules)))
    return 0

nri_api.stub.Plugin.serve = probe
from nri_resmgr.cli import main
sys.exit(main(sys.argv[1:]))
"""

#: never needed before registration (on the launcher's path: no node name, no --topology)
NOT_BEFORE_REGISTRATION = (
    # structlog imports these only to offer them as exception formatters (ops/logs.py)
    "rich",
    "better_exceptions",
    "colorama",
    # link names come from socket.if_nameindex (topology/discover.py)
    "pyroute2",
    # the Kubernetes side is off without a node name (runtime/process.py)
    "nri_resmgr.kube",
    "nri_resmgr.kube.agent",
    "nri_resmgr.kube.client",
    "nri_resmgr.kube.report",
    "nri_resmgr.kube.config_source",
    # RDT past its configuration models, with no RDT configured (control/resctrl/__init__.py)
    "nri_resmgr.control.resctrl.annotation",
    "nri_resmgr.control.resctrl.controller",
    "nri_resmgr.control.resctrl.groups",
    "nri_resmgr.control.resctrl.info",
    "nri_resmgr.control.resctrl.monitor",
    "nri_resmgr.control.resctrl.plan",
    # block I/O past its configuration models, with no classes configured (control/wiring.py)
    "nri_resmgr.control.blockio",
    # the memory components past their configuration models, with none configured
    # (control/wiring.py: memory_control)
    "nri_resmgr.control.memory",
    "nri_resmgr.control.mempolicy",
    "nri_resmgr.control.memqos",
    "nri_resmgr.control.sgxepc",
    # the Prometheus exposition and the HTTP stack prometheus_client imports, until the
    # metrics are read (ops/metrics.py); nobody reads them without an HTTP endpoint
    "nri_resmgr.ops.exposition",
    "prometheus_client",
    "http.server",
    "urllib.request",
    # --topology only
    "nri_resmgr.topology.load",
    "nri_resmgr.topology.synthetic",
    # other commands (cli.py imports the named command only)
    "nri_resmgr.commands.simulate",
    "nri_resmgr.commands.topology",
    "nri_resmgr.commands.validate_config",
    "nri_resmgr.commands.install",
    "nri_resmgr.commands.enable_nri",
    "nri_resmgr.commands.uninstall",
    "nri_resmgr.simulator",
    "nri_resmgr.ops.runtime_config",
    "nri_resmgr.ops.install",
    "tomlkit",
)


def _environment() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NODE_NAME", "KUBECONFIG", "POD_NAMESPACE", "PYTHONSTARTUP")
    }
    env.update(NRI_PLUGIN_NAME="resmgr", NRI_PLUGIN_IDX="90")
    return env


def _modules_at_connect(args: list[str]) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        cwd=REPO,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_run_imports_nothing_it_does_not_need_before_registering(tmp_path: Path) -> None:
    require_sysfs()
    modules = _modules_at_connect(
        ["run", "--log-file", str(tmp_path / "log"), "--state-dir", str(tmp_path)]
    )
    # the probe ran where the daemon connects: the daemon and its policy were loaded
    assert {"nri_resmgr.runtime.daemon", "nri_resmgr.policy.topology_aware.policy"} <= modules
    assert sorted(modules.intersection(NOT_BEFORE_REGISTRATION)) == []


def test_a_memory_section_loads_its_components_before_registering(tmp_path: Path) -> None:
    """The other side of the lazy memory components: configured, they are built (and
    their modules loaded) with the start-up pipeline, before the daemon connects."""
    require_sysfs()
    config = tmp_path / "config.yaml"
    config.write_text(
        "control:\n"
        "  memoryPolicy:\n"
        "    classes: [{name: local, policy: {mode: MPOL_LOCAL}}]\n"
        "  sgxEpc: {enable: true}\n"
    )
    log, state = str(tmp_path / "log"), str(tmp_path)
    modules = _modules_at_connect(
        ["run", "--log-file", log, "--state-dir", state, "--config", str(config)]
    )
    memory = {
        "nri_resmgr.control.memory",
        "nri_resmgr.control.mempolicy",
        "nri_resmgr.control.memqos",
        "nri_resmgr.control.sgxepc",
    }
    assert sorted(memory - modules) == []


def test_topology_option_still_loads_the_topology_loader(tmp_path: Path) -> None:
    modules = _modules_at_connect(
        [
            "run",
            "--log-file",
            str(tmp_path / "log"),
            "--state-dir",
            str(tmp_path),
            "--topology",
            "packages=1,nodes=1,cores=2,threads=2",
        ]
    )
    assert "nri_resmgr.topology.load" in modules
    assert "nri_resmgr.commands.topology" not in modules


def test_structlog_is_imported_without_rich_and_rich_still_imports_later() -> None:
    if importlib.util.find_spec("rich") is None:
        pytest.skip("rich is not installed")
    code = (
        "import sys\n"
        "import nri_resmgr.ops.logs\n"
        "assert 'structlog' in sys.modules\n"
        "assert 'rich' not in sys.modules, 'structlog pulled in rich'\n"
        "import rich.console\n"  # hidden only while structlog itself was imported
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("command", ["run", "validate-config", "enable-nri", "topology"])
def test_the_named_command_alone_parses_and_helps_as_in_the_full_parser(
    command: str,
) -> None:
    from nri_resmgr.cli import COMMAND_MODULES, _named_command, build_parser

    module = _named_command([command, "--help"])
    assert module == command.replace("-", "_")
    alone, table = build_parser((module,))
    assert list(table) == [command]
    full, _ = build_parser(COMMAND_MODULES)

    assert _sub_help(alone, command) == _sub_help(full, command)


def _sub_help(parser: argparse.ArgumentParser, command: str) -> str:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = action.choices[command]
    return sub.format_help()


@pytest.mark.parametrize(
    "argv", [[], ["--help"], ["-h", "run"], ["validate_config", "x"], ["bogus"], ["report"]]
)
def test_anything_but_an_exact_command_name_gets_every_command(argv: list[str]) -> None:
    from nri_resmgr.cli import _named_command

    assert _named_command(argv) is None
