"""The guide's smallest complete policy: one package and one record are a whole policy.

`examples/policies/all_cpus.py` is installed the way a distribution of its own would be
(a ``.dist-info`` directory naming its record in the ``nri_resmgr.policies`` entry-point
group, on a fresh interpreter's path): the registry loads it by name, ``validate-config``
checks its configuration with paths, and its decisions hold.  docs/policies.md quotes the
file whole.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from nri_resmgr.model import ConfigError, CPUKind
from nri_resmgr.policy.base import PolicyRecord
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, small
from tests.support.requirements import REPO

EXAMPLE = REPO / "examples" / "policies" / "all_cpus.py"
TOPO = "{packages: 1, nodes: 2, cores: 2, threads: 2, memory: 1G}"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("all_cpus_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while it executes
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.fixture
def installed(tmp_path: Path) -> dict[str, str]:
    """The environment of an interpreter with the example installed as a distribution."""
    dist = tmp_path / "all_cpus_example-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: all-cpus-example\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[nri_resmgr.policies]\nall-cpus = all_cpus:RECORD\n")
    path = os.pathsep.join([str(tmp_path), str(EXAMPLE.parent), str(REPO)])
    return {**os.environ, "PYTHONPATH": path}


def _python(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env=env
    )


def _validate(env: dict[str, str], path: Path) -> subprocess.CompletedProcess[str]:
    return _python(env, "-m", "nri_resmgr.cli", "validate-config", str(path), "--topology", TOPO)


def test_the_registry_loads_it_through_its_entry_point(installed: dict[str, str]) -> None:
    probe = (
        "from nri_resmgr.policy_registry import available_policies, load_policy\n"
        "from nri_resmgr.topology.load import load_topology\n"
        "src = available_policies()['all-cpus']\n"
        "print(src.origin)\n"
        f"p = load_policy('all-cpus', topology=load_topology({TOPO!r}), config={{}})\n"
        "print(type(p).__name__, p.render(p.initial_state()), p.irq_use(p.initial_state()))\n"
    )
    proc = _python(installed, "-c", probe)
    assert proc.returncode == 0, proc.stderr
    origin, built = proc.stdout.splitlines()
    assert origin == "entry point all_cpus:RECORD"
    assert built.startswith("AllCPUsPolicy {} IrqUse(")


def test_validate_config_checks_its_keys_with_paths(
    installed: dict[str, str], tmp_path: Path
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("policy: all-cpus\npolicyConfig: {availableResources: {cpu: 'cpuset:1-3'}}\n")
    proc = _python(
        installed, "-m", "nri_resmgr.cli", "validate-config", str(good), "--topology", TOPO
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, f"{good}: valid"), proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: all-cpus\npolicyConfig: {availableResource: {}}\n")
    proc = _python(
        installed, "-m", "nri_resmgr.cli", "validate-config", str(bad), "--topology", TOPO
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"{bad}: policyConfig: unknown key availableResource; expected one of "
        "availableResources; did you mean availableResources?",
        f"{bad}: 1 error(s)",
    ]
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("policy: all-cpus\npolicyConfig: {availableResources: {cpu: 'cpuset:0-x'}}\n")
    proc = _python(
        installed, "-m", "nri_resmgr.cli", "validate-config", str(wrong), "--topology", TOPO
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[0].startswith(
        f"{wrong}: policyConfig.availableResources.cpu: id list '0-x': "
    )


def test_its_decisions() -> None:
    module = _example()
    record = module.RECORD
    assert isinstance(record, PolicyRecord) and record.name == "all-cpus"
    topo = small()
    p = record.build(topology=topo, config={"availableResources": {"cpu": "exclude-cpuset:0"}})
    d = p.allocate(p.initial_state(), ctr("a"))
    assert d.assignment is not None and d.updates == ()
    assert d.assignment.cpus == topo.online_cpus() - IDSet([0])
    assert d.assignment.kind is CPUKind.SHARED
    s = p.allocate(d.state, ctr("b")).state
    assert (
        p.release(s, d.assignment.container_id).state
        == p.allocate(p.initial_state(), ctr("b")).state
    )
    cpus = str(d.assignment.cpus)
    mems = str(d.assignment.mems)
    # a runs where it should (listed twice: the first report counts); b moves
    r = p.rebuild([ctr("a", cur=cpus, cur_mems=mems), ctr("b", cur="0"), ctr("a", cur="0")])
    assert [str(u.container_id) for u in r.updates] == ["p-b"]
    with pytest.raises(ConfigError, match=r"availableResources\.cpu: expected cpuset:LIST"):
        record.build(topology=topo, config={"availableResources": {"cpu": "2"}})


def test_the_guide_quotes_the_example_whole() -> None:
    guide = (REPO / "docs" / "policies.md").read_text()
    assert f"```python\n{EXAMPLE.read_text()}```\n" in guide
