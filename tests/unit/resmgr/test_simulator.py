"""The simulator: scenario steps, their outputs (JSON, table), errors, the command line and
the controllers a scenario drives.  Quantities and the kubelet-shaped messages are
`test_simulator_kubelet`; random lifecycles `test_simulator_props`; hostile scenarios
`test_simulator_bounds`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nri_resmgr.cli import main
from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import ConfigError
from nri_resmgr.simulator.results import render_json, render_table
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import (
    ScenarioError,
    load_scenario,
)
from tests.support.logs import QUIET
from tests.support.simulator import scenario

G2 = {
    "name": "c0",
    "requests": {"cpu": "2", "memory": "100M"},
    "limits": {"cpu": "2", "memory": "100M"},
}


def test_json_output_shape() -> None:
    sc = load_scenario(
        scenario(
            [
                {"create": {"pod": "pod0", "containers": [G2]}},
                {
                    "create": {
                        "pod": "pod1",
                        "containers": [{"name": "c0", "requests": {"cpu": "1"}}],
                    }
                },
                {"delete": {"pod": "pod0"}},
            ]
        )
    )
    doc = json.loads(render_json(run_scenario(sc, log=QUIET)))
    assert doc["policy"] == "static"
    assert [s["op"] for s in doc["steps"]] == ["create", "create", "delete"]
    first = doc["steps"][0]
    # the NodeResourceTopology of the step (tests/unit/kube/test_nrt.py checks its content)
    nrt = first.pop("nrt")
    assert {z["name"] for z in nrt["zones"]} >= {"node-0"}
    assert first == {
        "step": 0,
        "op": "create",
        "pod": "pod0",
        "errors": [],
        "updates": {},
        "containers": {
            "pod0/c0": {
                "cpus": "1,5",
                "mems": "",
                "kind": "exclusive",
                "pool": "exclusive",
                "rdt_class": None,
                "blockio_class": None,
            }
        },
    }
    assert doc["steps"][1]["containers"]["pod1/c0"]["cpus"] == "0,2-4,6-7"
    assert doc["steps"][2]["updates"] == {"pod1/c0": "0-7"}
    assert list(doc["steps"][2]["containers"]) == ["pod1/c0"]


def test_errors_are_reported_and_the_simulation_continues() -> None:
    huge = {
        **G2,
        "name": "big",
        "requests": {"cpu": "8", "memory": "1G"},
        "limits": {"cpu": "8", "memory": "1G"},
    }
    sc = load_scenario(
        scenario(
            [
                {"create": {"pod": "a", "containers": [huge, G2]}},
                {"create": {"pod": "b", "containers": [G2]}},
            ]
        )
    )
    result = run_scenario(sc, log=QUIET)
    (err,) = result.steps[0].errors
    assert err.startswith("a/big: pod default/a container big: requested 8 exclusive CPUs")
    assert list(result.steps[0].containers) == ["a/c0"]
    assert result.steps[1].containers["b/c0"].cpus == "2,6"


def test_failed_init_container_blocks_the_app_containers() -> None:
    huge = {
        "name": "init",
        "requests": {"cpu": "8", "memory": "1G"},
        "limits": {"cpu": "8", "memory": "1G"},
    }
    sc = load_scenario(
        scenario(
            [
                {"create": {"pod": "a", "init_containers": [huge], "containers": [G2]}},
            ]
        )
    )
    step = run_scenario(sc, log=QUIET).steps[0]
    assert len(step.errors) == 1 and step.errors[0].startswith("a/init: ")
    assert dict(step.containers) == {}


def test_update_step_resizes_in_place() -> None:
    sc = load_scenario(
        scenario(
            [
                {"create": {"pod": "a", "containers": [G2]}},
                {
                    "update": {
                        "pod": "a",
                        "container": "c0",
                        "requests": {"cpu": "4", "memory": "100M"},
                        "limits": {"cpu": "4", "memory": "100M"},
                    }
                },
            ]
        )
    )
    result = run_scenario(sc, log=QUIET)
    assert result.steps[0].containers["a/c0"].cpus == "1,5"
    assert result.steps[1].containers["a/c0"].cpus == "1-2,5-6"
    assert result.steps[1].updates == {"a/c0": "1-2,5-6"}


def test_restart_keeps_placements_and_state() -> None:
    sc = load_scenario(
        scenario(
            [
                {"create": {"pod": "a", "containers": [G2]}},
                {"create": {"pod": "b", "containers": [{"name": "c0", "requests": {"cpu": "1"}}]}},
                {"restart": {}},
                {"create": {"pod": "c", "containers": [G2]}},
            ]
        )
    )
    result = run_scenario(sc, log=QUIET)
    assert result.steps[2].updates == {}
    assert result.steps[2].containers == result.steps[1].containers
    assert result.steps[3].containers["c/c0"].cpus == "2,6"


def test_cgroupfs_driver_gives_the_same_qos() -> None:
    sc = load_scenario(
        scenario([{"create": {"pod": "a", "containers": [G2]}}], cgroupDriver="cgroupfs")
    )
    assert run_scenario(sc, log=QUIET).steps[0].containers["a/c0"].kind == "exclusive"


def test_overrides_policy_and_config() -> None:
    plain = load_scenario(scenario([{"create": {"pod": "a", "containers": [G2]}}], config={}))
    none = run_scenario(plain, policy="none", log=QUIET)
    assert none.policy == "none"
    assert none.steps[0].containers["a/c0"].kind == "none"
    sc = load_scenario(scenario([{"create": {"pod": "a", "containers": [G2]}}]))
    cfg = config_from_mapping({"policyConfig": {"reservedSystemCPUs": "0-1"}})
    result = run_scenario(sc, config=cfg, log=QUIET)
    assert result.policy == "static"  # the scenario's policy: the config names none
    assert result.steps[0].containers["a/c0"].cpus == "2,6"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"steps": [{"create": {"pod": "a"}, "delete": {"pod": "a"}}]},
            "expected exactly one of create, delete, update, restart",
        ),
        (
            {"steps": [{"create": {"pod": "a", "containerz": []}}]},
            r"steps\[0\]\.create: unknown key containerz; expected one of pod, namespace, ",
        ),
        ({"steps": [{"delete": {"pod": "ghost"}}]}, "delete: no pod 'ghost'"),
    ],
)
def test_scenario_errors(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        run_scenario(load_scenario(scenario(**doc)), log=QUIET)


def test_bad_policy_config_names_policy_config() -> None:
    sc = load_scenario(scenario([], config={"reservedSystemCPUs": "0-99"}))
    with pytest.raises(ConfigError, match=r"^policyConfig\.reservedSystemCPUs: 0-99 includes"):
        run_scenario(sc, log=QUIET)


def test_a_policys_pydantic_error_is_one_line_with_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by tests/fuzz/test_config_fuzz.py: the static policy quoted pydantic's text."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario([], config={"reservedSystemCPUs": {}, "pinCPUs": 1})))
    assert main(["simulate", "--scenario", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "nri-resmgr simulate: policyConfig.reservedSystemCPUs: expected a valid string, found "
        "{}; policyConfig: unknown key pinCPUs; expected one of reservedSystemCPUs, "
        "reservedResources, options, pinMemory"
    ]


def test_table_output() -> None:
    sc = load_scenario(scenario([{"create": {"pod": "a", "containers": [G2]}}]))
    table = render_table(run_scenario(sc, log=QUIET))
    assert "step 0: create a" in table
    row = next(line for line in table.splitlines() if line.strip().startswith("a/c0"))
    assert row.split() == ["a/c0", "exclusive", "1,5", "exclusive", "-", "-"]


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(scenario([{"create": {"pod": "a", "containers": [G2]}}])))
    assert main(["simulate", "--scenario", str(path), "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"][0]["containers"]["a/c0"]["cpus"] == "1,5"
    assert (
        main(
            [
                "simulate",
                "--scenario",
                str(path),
                "--topology",
                "packages=1,nodes=1,cores=2,threads=2",
                "--output",
                "json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"][0]["containers"]["a/c0"]["cpus"] == "1,3"
    assert main(["simulate", "--scenario", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: cannot open: No such file" in capsys.readouterr().err


def test_resctrl_root_drives_the_rdt_controller(tmp_path: Path) -> None:
    from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree

    root = tmp_path / "resctrl"
    make_resctrl_tree(root, INTEL_SKX)
    sc = load_scenario(
        scenario(
            [
                {
                    "create": {
                        "pod": "a",
                        "annotations": {"rdtclass.resource-policy.nri.io": "gold"},
                        "containers": [G2],
                    }
                }
            ],
            control={
                "rdt": {
                    "enable": True,
                    "partitions": {
                        "p": {
                            "l3Allocation": "100%",
                            "classes": {"gold": {"l3Allocation": "50-100%"}},
                        }
                    },
                },
            },
        )
    )
    result = run_scenario(sc, resctrl_root=str(root), log=QUIET)
    assert result.steps[0].containers["a/c0"].rdt_class == "gold"
    assert (root / "gold" / "schemata").is_file()


def test_cgroup_root_drives_the_block_io_controller(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    sc = load_scenario(
        scenario(
            [
                {
                    "create": {
                        "pod": "a",
                        "annotations": {"blockioclass.resource-policy.nri.io/pod": "slow"},
                        "containers": [G2, {"name": "other"}],
                    }
                }
            ],
            control={"blockio": {"enable": True, "classes": {"slow": {"weight": 100}}}},
        )
    )
    result = run_scenario(sc, cgroup_root=str(root), log=QUIET)
    step = result.steps[0]
    assert step.errors == ()
    assert step.containers["a/c0"].blockio_class == "slow"
    written = {p.parent.name: p.read_text() for p in root.rglob("io.weight")}
    assert len(written) == 2
    assert set(written.values()) == {"default 100"}
    assert all(name.startswith("cri-containerd-") and name.endswith(".scope") for name in written)
