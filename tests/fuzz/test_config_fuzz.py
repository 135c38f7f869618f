"""Hostile configurations and scenarios through validate-config and simulate.

Every case must end in an answer or in clean error lines: validate-config exits 0 or 1
with one ``FILE: ...`` line per error and a count that matches them; simulate exits 0 or
2 with one ``nri-resmgr simulate: ...`` line; never a traceback, a hang or an exception
out of ``run()``.

The cases are seeded mutations of real documents (the configuration samples of the docs,
the example scenarios): values replaced by hostile ones (huge, negative, non-finite,
deeply nested, wrong types, hostile paths and CPU lists), keys dropped, unknown keys
added, and the encoded text damaged byte by byte.  Most run in process through the
commands' ``run()``; a few run as real processes.

A CI run tries ``NRI_RESMGR_FUZZ_CASES`` configurations (default 2000) and a quarter as
many scenarios (each runs a whole simulation), about 30 s in all; a case is
reproduced by its seed and index.  A long run::

    NRI_RESMGR_FUZZ_CASES=20000 NRI_RESMGR_FUZZ_SEED=1 \\
        python3 -m pytest -q -p no:randomly tests/fuzz/test_config_fuzz.py

A failing case is written to ``$NRI_RESMGR_FUZZ_OUT`` (default: the test's tmp_path),
named by target, seed and index.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_resmgr.commands import simulate, validate_config
from tests.support.requirements import REPO

ENV_CASES = "NRI_RESMGR_FUZZ_CASES"
ENV_SEED = "NRI_RESMGR_FUZZ_SEED"
DEFAULT_CASES = 2000
DEFAULT_SEED = 20261123
CASES = int(os.environ.get(ENV_CASES, "") or DEFAULT_CASES)
SEED = int(os.environ.get(ENV_SEED, "") or DEFAULT_SEED)
#: a scenario runs a whole simulation (about 0.3 s), a configuration is checked in ~15 ms
SIMULATE_CASES = max(1, CASES // 4)
#: small enough that the policies build in milliseconds
TOPOLOGY = "packages=1,nodes=2,cores=4,threads=2"

Doc = Any


# ---- the seed documents ----------------------------------------------------------------


def config_seeds() -> list[Doc]:
    """The configuration samples of the docs, and one of each policy and controller."""
    from tests.unit.resmgr.test_docs_config_samples import SAMPLES

    seeds: list[Doc] = [yaml.safe_load(text) for _, text in SAMPLES]
    seeds += [
        {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0-1"}},
        {"policy": "static", "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}}},
        {"policy": "none", "policyConfig": {}},
        {
            "policy": "topology-aware",
            "policyConfig": {
                "reservedResources": {"cpu": "750m"},
                "availableResources": {"cpu": "exclude-cpuset:7"},
                "reservedPoolNamespaces": ["infra-*"],
                "pinMemory": False,
            },
        },
        {
            "policy": "topology-aware",
            "policyConfig": {
                "defaultCPUPriority": "high",
                "colocatePods": True,
                "schedulingClasses": [
                    {"name": "rt", "policy": "fifo", "priority": 42, "flags": ["reset-on-fork"]},
                    {
                        "name": "idle",
                        "policy": "idle",
                        "nice": 17,
                        "ioClass": "be",
                        "ioPriority": 6,
                    },
                    {"name": "dl", "policy": "deadline", "runtime": 1000, "deadline": 2000},
                ],
                "namespaceSchedulingClasses": {"kube-system": "rt"},
                "podQoSSchedulingClasses": {"BestEffort": "idle", "burstable": "dl"},
            },
        },
        {
            "control": {
                "blockio": {
                    "enable": True,
                    "classes": {
                        "slow": {
                            "weight": 100,
                            "devices": [{"devices": ["/dev/sd*"], "throttleReadBps": "50M"}],
                        }
                    },
                }
            }
        },
    ]
    return seeds


def scenario_seeds() -> list[Doc]:
    """The example scenarios, with a small inline topology (fast to build)."""
    out = []
    for path in sorted((REPO / "examples" / "scenarios").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(doc.get("topology"), str):
            doc["topology"] = {"packages": 2, "nodes": 2, "cores": 2, "threads": 2}
        out.append(doc)
    return out


# ---- mutations ---------------------------------------------------------------------------


def hostile_value(rng: random.Random) -> Any:
    depth = rng.choice([10, 65, 500, 5000])
    return rng.choice(
        [
            None,
            True,
            -1,
            0,
            2**63,
            10**400,
            -(2**70),
            float("inf"),
            float("-inf"),
            float("nan"),
            1e308,
            "",
            " ",
            "x" * rng.choice([65, 4097, 70_000]),
            "0-4294967295",
            "cpuset:0-4294967295",
            "cpuset:0-1,x,5-3",
            "exclude-cpuset:" + ",".join(str(i) for i in range(0, 9000, 3)),
            "1e400",
            "-750m",
            "99999999999999999999999T",
            "/etc/passwd",
            "/dev/../etc/shadow",
            "../../../../etc",
            "\x00",
            "\ud7ff\ue000 \u202e",
            "nan",
            "Infinity",
            [],
            {},
            [None] * 3,
            {"": None},
            {"pinCPUs": True, "bogus": {"x": 1}},
            # deeper in text (damage_text); as a value, shallow enough for json.dumps
            json.loads("[" * min(depth, 400) + "]" * min(depth, 400)),
            {str(i): i for i in range(200)},
        ]
    )


def _containers(doc: Doc) -> list[tuple[Any, Any]]:
    """(container, key) of every value in `doc`, without recursion."""
    found: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                found.append((item, key))
                stack.append(value)
        elif isinstance(item, list):
            for i, value in enumerate(item):
                found.append((item, i))
                stack.append(value)
    return found


def mutate_structure(doc: Doc, rng: random.Random) -> Doc:
    doc = json.loads(json.dumps(doc))  # a copy
    for _ in range(rng.choice([1, 1, 1, 2, 3, 4])):  # mostly one: the rest stays valid
        slots = _containers(doc)
        if not slots:
            return hostile_value(rng)
        parent, key = rng.choice(slots)
        action = rng.random()
        if action < 0.6:
            parent[key] = hostile_value(rng)
        elif action < 0.75 and isinstance(parent, dict):
            del parent[key]
        elif action < 0.9 and isinstance(parent, dict):
            parent[rng.choice(["bogus", "pinCPUs", str(key).upper(), str(key) + "s", ""])] = (
                hostile_value(rng)
            )
        else:
            # repeat a value (a long list of it), up to past the 1 MiB document bound
            size = len(json.dumps(parent[key])) + 1
            times = max(2, min(rng.choice([2, 50, 2000]), (2 << 20) // size))
            value = parent[key] if isinstance(parent[key], list) else [parent[key]]
            parent[key] = value * times
            break  # the copies share their parts: a later change would multiply them all
    return doc


def damage_text(text: bytes, rng: random.Random) -> bytes:
    data = bytearray(text)
    for _ in range(rng.randint(1, 8)):
        if not data:
            break
        at = rng.randrange(len(data))
        choice = rng.random()
        if choice < 0.3:
            data[at] = rng.randrange(256)
        elif choice < 0.5:
            del data[at : at + rng.randint(1, 40)]
        elif choice < 0.7:
            data[at:at] = rng.choice(
                [
                    b"\xff\xfe",
                    b"[" * 3000,
                    b"{a: &x [1]}",
                    b"*x",
                    b": :",
                    b"\t",
                    b"!!python/name:os",
                ]
            )
        elif choice < 0.85:
            data = data[:at]
        else:
            chunk = data[at : at + rng.randint(1, 200)]
            data[at:at] = chunk * rng.randint(2, 50)
    return bytes(data)


def hostile_document(seeds: list[Doc], rng: random.Random) -> bytes:
    """One case: a seed, mutated in structure and/or damaged as text."""
    doc = mutate_structure(rng.choice(seeds), rng)
    text = json.dumps(doc).encode()
    if len(text) < 65536 and rng.random() < 0.5:  # PyYAML's dumper is slow on big documents
        with contextlib.suppress(RecursionError):  # PyYAML's dumper recurses per level
            text = yaml.safe_dump(doc, allow_unicode=True, width=1 << 20).encode("utf-8", "replace")
    if rng.random() < 0.35:
        text = damage_text(text, rng)
    return text


# ---- the checks --------------------------------------------------------------------------


def run_command(
    run: Callable[[argparse.Namespace], int], args: argparse.Namespace
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(args)
    return rc, out.getvalue(), err.getvalue()


def check_validate_config(path: Path, rc: int, out: str, err: str) -> None:
    # keys accepted without effect (nri-plugins' own) are warnings, before any error
    lines = err.splitlines()
    warnings = [line for line in lines if line.startswith(f"{path}: warning: ")]
    assert lines[: len(warnings)] == warnings, err
    lines = lines[len(warnings) :]
    if rc == 0:
        assert out == f"{path}: valid\n" and not lines, (out, err)
        return
    assert rc == 1, (rc, err)
    assert lines and all(line.startswith(f"{path}: ") for line in lines), err
    errors = lines[:-1]
    assert lines[-1] == f"{path}: {len(errors)} error(s)", err
    assert all(line.strip() != f"{path}:" for line in errors), err


def check_simulate(rc: int, out: str, err: str) -> None:
    if rc == 0:
        result = json.loads(out)  # the commands here ask for --output json
        assert isinstance(result["steps"], list), out[:200]
        return
    assert rc == 2, (rc, err)
    assert re.fullmatch(r"nri-resmgr simulate: [^\n]+\n", err), err[:2000]


def keep(out_dir: Path, name: str, data: bytes) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_bytes(data)
    return path


def fuzz(
    tmp_path: Path,
    target: str,
    seeds: list[Doc],
    case: Callable[[Path], None],
    suffix: str,
    cases: int,
) -> None:
    rng = random.Random(f"{target}/{SEED}")
    out_dir = Path(os.environ.get("NRI_RESMGR_FUZZ_OUT", "") or tmp_path / "failures")
    failures = []
    for index in range(cases):
        data = hostile_document(seeds, rng)
        path = tmp_path / f"case{suffix}"
        path.write_bytes(data)
        try:
            case(path)
        except Exception as exc:  # a case failed: keep it and go on, to report them all
            kept = keep(out_dir, f"{target}-seed{SEED}-case{index}{suffix}", data)
            failures.append(f"case {index} ({kept}): {type(exc).__name__}: {exc}"[:600])
    assert not failures, f"{len(failures)} of {cases} cases failed:\n" + "\n".join(failures[:10])


@pytest.mark.timeout(max(600, CASES))
def test_validate_config_answers_every_hostile_configuration(tmp_path: Path) -> None:
    def case(path: Path) -> None:
        args = argparse.Namespace(file=str(path), topology=TOPOLOGY, sysfs_root="/")
        check_validate_config(path, *run_command(validate_config.run, args))

    fuzz(tmp_path, "validate-config", config_seeds(), case, ".yaml", CASES)


@pytest.mark.timeout(max(600, 2 * SIMULATE_CASES))
def test_simulate_answers_every_hostile_scenario(tmp_path: Path) -> None:
    def case(path: Path) -> None:
        args = argparse.Namespace(
            scenario=str(path),
            topology=None,
            policy=None,
            config=None,
            output="json",
            resctrl_root=None,
            cgroup_root=None,
            log=False,
            html=None,
        )
        check_simulate(*run_command(simulate.run, args))

    fuzz(tmp_path, "simulate", scenario_seeds(), case, ".json", SIMULATE_CASES)


def _process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nri_resmgr.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("index", range(4))
def test_real_processes_end_in_error_lines(tmp_path: Path, index: int) -> None:
    """A few cases through the real command line, as a user runs it."""
    rng = random.Random(f"process/{SEED}/{index}")
    config = tmp_path / "config.yaml"
    config.write_bytes(hostile_document(config_seeds(), rng))
    done = _process("validate-config", str(config), "--topology", TOPOLOGY)
    assert "Traceback" not in done.stderr
    check_validate_config(config, done.returncode, done.stdout, done.stderr)
    scenario = tmp_path / "scenario.json"
    scenario.write_bytes(hostile_document(scenario_seeds(), rng))
    done = _process("simulate", "--scenario", str(scenario), "--output", "json")
    assert "Traceback" not in done.stderr
    check_simulate(done.returncode, done.stdout, done.stderr)


def test_special_files_do_not_hang_or_exhaust_memory(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in ("/dev/zero", "/dev/urandom", str(fifo), str(tmp_path)):
        done = _process("validate-config", target)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "expected a regular file" in done.stderr
        done = _process("simulate", "--scenario", target)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "expected a regular file" in done.stderr
