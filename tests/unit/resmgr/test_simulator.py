"""The simulator: kubelet-shaped NRI messages, steps, outputs and the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_resmgr.cli import main
from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import ConfigError, ContainerID, QoSClass, Request
from nri_resmgr.policy_registry import load_policy
from nri_resmgr.runtime import adapter
from nri_resmgr.simulator.kubelet import Simulator, container_resources, pod_qos
from nri_resmgr.simulator.results import render_json, render_table
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import (
    ContainerSpec,
    DeleteSpec,
    PodSpec,
    Resources,
    ScenarioError,
    load_scenario,
    parse_cpu,
    parse_memory,
)
from nri_resmgr.topology.synthetic import build_topology
from tests.support.logs import QUIET

SMALL = {"packages": 1, "dies": 1, "nodes": 1, "cores": 4, "threads": 2, "memory": "4G"}


def spec(
    name: str, req: dict[str, Any] | None = None, lim: dict[str, Any] | None = None
) -> ContainerSpec:
    return ContainerSpec(
        name=name, requests=Resources(**(req or {})), limits=Resources(**(lim or {}))
    )


@pytest.mark.parametrize(
    ("text", "milli"), [("1", 1000), ("500m", 500), ("1.5", 1500), (2, 2000), ("0.1", 100)]
)
def test_parse_cpu(text: str | int, milli: int) -> None:
    assert parse_cpu(text, what="x") == milli


@pytest.mark.parametrize(
    ("text", "size"),
    [("100M", 100 * 10**6), ("1Gi", 1 << 30), ("2G", 2 * 10**9), (1024, 1024), ("64Ki", 65536)],
)
def test_parse_memory(text: str | int, size: int) -> None:
    assert parse_memory(text, what="x") == size


def test_bad_quantities_are_clear_errors() -> None:
    with pytest.raises(ScenarioError, match=r"c0 requests.cpu: expected a CPU quantity.*'lots'"):
        pod_qos(PodSpec(pod="p", containers=(spec("c0", {"cpu": "lots"}),)))
    with pytest.raises(ScenarioError, match="expected a memory quantity"):
        parse_memory("1XB", what="m")


@pytest.mark.parametrize(
    ("containers", "inits", "qos"),
    [
        ((spec("a"),), (), QoSClass.BEST_EFFORT),
        ((spec("a", lim={"cpu": "1", "memory": "1G"}),), (), QoSClass.GUARANTEED),
        (
            (spec("a", {"cpu": "1", "memory": "1G"}, {"cpu": "1", "memory": "1G"}),),
            (),
            QoSClass.GUARANTEED,
        ),
        ((spec("a", {"cpu": "500m"}, {"cpu": "1", "memory": "1G"}),), (), QoSClass.BURSTABLE),
        ((spec("a", lim={"cpu": "1", "memory": "1G"}), spec("b")), (), QoSClass.BURSTABLE),
        ((spec("a", lim={"cpu": "1", "memory": "1G"}),), (spec("i"),), QoSClass.BURSTABLE),
        ((spec("a"),), (spec("i", {"cpu": "100m"}),), QoSClass.BURSTABLE),
    ],
    ids=["none", "limits-only", "equal", "request-below", "one-empty", "init-empty", "init-req"],
)
def test_pod_qos_follows_kubernetes(
    containers: tuple[ContainerSpec, ...], inits: tuple[ContainerSpec, ...], qos: QoSClass
) -> None:
    assert pod_qos(PodSpec(pod="p", containers=containers, init_containers=inits)) == qos


@pytest.mark.parametrize(
    ("c", "shares", "quota", "mem"),
    [
        (spec("a"), 2, None, None),
        (spec("a", {"cpu": "250m"}), 256, None, None),
        (spec("a", lim={"cpu": "2", "memory": "1Gi"}), 2048, 200000, 1 << 30),
        (spec("a", {"cpu": "1m"}, {"cpu": "5m"}), 2, 1000, None),
    ],
    ids=["besteffort", "request", "limit-defaults-request", "min-quota"],
)
def test_container_resources_like_the_kubelet(
    c: ContainerSpec, shares: int, quota: int | None, mem: int | None
) -> None:
    r = container_resources(c)
    assert r.cpu.shares.value == shares
    assert (r.cpu.quota.value if r.cpu.HasField("quota") else None) == quota
    assert (r.cpu.period.value if r.cpu.HasField("period") else None) == (
        100000 if quota is not None else None
    )
    assert (r.memory.limit.value if r.memory.HasField("limit") else None) == mem


def test_adapter_reads_back_what_the_kubelet_wrote() -> None:
    r = container_resources(
        spec("a", {"cpu": "1500m", "memory": "1G"}, {"cpu": "2", "memory": "2G"})
    )
    assert adapter.request_from_resources(r) == Request(
        cpu_request_milli=1500, cpu_limit_milli=2000, memory_limit=2 * 10**9
    )


def scenario(steps: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {
        "topology": SMALL,
        "policy": "static",
        "config": {"reservedSystemCPUs": "0"},
        "steps": steps,
        **kw,
    }


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


# ---- properties: the runtime's view always matches the pipeline's ----------------------

TOPO = build_topology({"packages": 2, "dies": 1, "nodes": 2, "cores": 2, "threads": 2})
POLICIES: dict[str, dict[str, Any]] = {
    "static": {"reservedSystemCPUs": "0"},
    "topology-aware": {"reservedResources": {"cpu": "750m"}},
}
OPS = st.one_of(
    st.tuples(st.just("guaranteed"), st.integers(1, 6)),
    st.tuples(st.just("burstable"), st.integers(0, 3000)),
    st.tuples(st.just("delete"), st.integers(0, 20)),
    st.tuples(st.just("restart"), st.just(0)),
)


def check_invariants(sim: Simulator) -> None:
    pipeline = sim.pipeline
    exclusive: set[int] = set()
    for cid, (_, c) in sim.live.items():
        a = pipeline.assignments[ContainerID(cid)]
        # what the runtime applied is what the pipeline believes
        assert c.linux.resources.cpu.cpus == str(a.cpus), (cid, a)
        if a.kind in ("exclusive", "isolated"):
            assert exclusive.isdisjoint(a.cpus.ids()), (cid, a.cpus, exclusive)
            exclusive |= a.cpus.ids()
    for cid in sim.live:
        a = pipeline.assignments[ContainerID(cid)]
        if a.kind in ("shared", "reserved"):
            assert a.cpus, cid
    assert set(pipeline.containers) == set(sim.live)
    # the pipeline records only what each decision names: that must be the whole truth,
    # i.e. equal to a full rendering of the policy's state
    render = getattr(pipeline.policy, "render", None)
    if callable(render):
        canonical = render(pipeline.state)
        for cid in sim.live:
            a, b = pipeline.assignments[ContainerID(cid)], canonical[ContainerID(cid)]
            assert (a.cpus, a.mems, a.kind) == (b.cpus, b.mems, b.kind), (cid, a, b)


@pytest.mark.parametrize("policy_name", list(POLICIES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, max_size=25))
def test_random_lifecycles_keep_runtime_and_pipeline_in_step(
    policy_name: str, ops: list[tuple[str, int]]
) -> None:
    policy = load_policy(policy_name, topology=TOPO, config=POLICIES[policy_name])
    sim = Simulator(policy=policy, log=QUIET)
    live: list[str] = []
    for i, (op, n) in enumerate(ops):
        if op == "guaranteed":
            q = {"cpu": str(n), "memory": "100M"}
            sim.create(
                PodSpec(
                    pod=f"p{i}",
                    containers=(
                        ContainerSpec(name="c", requests=Resources(**q), limits=Resources(**q)),
                    ),
                )
            )
            live.append(f"p{i}")
        elif op == "burstable":
            sim.create(
                PodSpec(
                    pod=f"p{i}",
                    containers=(ContainerSpec(name="c", requests=Resources(cpu=f"{n}m")),),
                )
            )
            live.append(f"p{i}")
        elif op == "delete" and live:
            sim.delete(DeleteSpec(pod=live.pop(n % len(live))))
        elif op == "restart":
            before = {cid: str(a.cpus) for cid, a in sim.pipeline.assignments.items()}
            _, moved = sim.restart()
            # a restart moves nothing the daemon itself placed
            assert moved == {}, moved
            after = {cid: str(a.cpus) for cid, a in sim.pipeline.assignments.items()}
            assert after == before
        check_invariants(sim)


def _pods(count: int, containers: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "create": {
                "pod": f"p{i}",
                "containers": [
                    {"name": f"c{j}", "requests": {"cpu": "10m"}} for j in range(containers)
                ],
            }
        }
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        pytest.param(
            [{"restart": {}}] * 1001,
            "steps: expected at most 1000 steps, found 1001",
            id="10001-steps",
        ),
        pytest.param(
            _pods(33, 8),
            "expected at most 256 containers created over the scenario, found 264",
            id="too-many-containers",
        ),
        pytest.param(
            _pods(1) + [{"restart": {}}] * 101,
            "expected at most 100 restart steps, found 101",
            id="too-many-restarts",
        ),
        pytest.param(
            _pods(100, 2) + [{"restart": {}}] * 60,
            "expected at most 10000 container rows",
            id="too-many-rows",
        ),
    ],
)
def test_scenario_bounds(steps: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_scenario(scenario(steps))


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        pytest.param(
            {"requests": {"cpu": "9" * 400}},
            "requests.cpu: expected a CPU quantity",
            id="cpu-400-digits",
        ),
        pytest.param(
            {"requests": {"cpu": "99999999999"}},
            "requests.cpu: expected at most 8192 CPUs",
            id="cpu-huge",
        ),
        pytest.param(
            {"limits": {"memory": "9" * 5000}},
            "limits.memory: expected a memory quantity",
            id="memory-5000-digits",
        ),
        pytest.param(
            {"limits": {"memory": "99999999999Ei"}},
            "limits.memory: expected at most 9223372036854775807 bytes",
            id="memory-huge",
        ),
    ],
)
def test_huge_quantities_are_scenario_errors(resources: dict[str, Any], message: str) -> None:
    sc = load_scenario(
        scenario([{"create": {"pod": "a", "containers": [{"name": "c", **resources}]}}])
    )
    with pytest.raises(ScenarioError, match=message):
        run_scenario(sc, log=QUIET)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '{"steps": ' + "[" * 5000 + "]" * 5000 + "}",
            "expected nesting at most 64 levels deep",
            id="deep-json",
        ),
        pytest.param(
            "steps:\n" + "".join("  " * i + "- \n" for i in range(1, 100)),
            "expected nesting at most 64 levels deep",
            id="deep-yaml",
        ),
        pytest.param(
            '{"steps": [{"create": {"pod": "a", "containers": [{"name": "c", '
            '"requests": {"cpu": 1e999}}]}}]}',
            "expected a finite number, found inf",
            id="inf-json",
        ),
    ],
)
def test_hostile_scenario_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    assert main(["simulate", "--scenario", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_topology_name_too_long_for_a_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by tests/fuzz/test_config_fuzz.py: the scenario-relative lookup raised OSError."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario([], topology="exclude-cpuset:" + "0," * 3000 + "1")))
    assert main(["simulate", "--scenario", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("nri-resmgr simulate: topology source 'exclude-cpuset:0,0,")
