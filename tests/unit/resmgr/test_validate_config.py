"""validate-config: every error, one per line, with its path in the document, never a trace."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.policy.topology_aware.config import TopologyAwareConfig
from nri_resmgr.validation import model_keys
from tests.support.requirements import REPO

TOPO = "{packages: 2, nodes: 1, cores: 2, threads: 2, memory: 1G}"
CONFIG_KEYS = "policy, policyConfig, policyDirs, control, log, instrumentation, limits, events"
# every key of the model, nri-plugins' accepted-without-effect ones included (helpers
# implementing keys change the model, not this line)
TA_KEYS = ", ".join(model_keys(TopologyAwareConfig, ()))


def run_file(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list[str]]:
    rc = main(["validate-config", str(path), "--topology", TOPO, *extra])
    err = capsys.readouterr().err
    return rc, [ln.removeprefix(f"{path}: ") for ln in err.splitlines()]


def run(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    return run_file(f, capsys)


def errors_of(rc: int, lines: list[str]) -> list[str]:
    """The error lines, after checking the exit status and that the count matches them."""
    assert rc == 1
    assert lines[-1] == f"{len(lines) - 1} error(s)"
    return lines[:-1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "polcy: none\n",
            [f"(document): unknown key polcy; expected one of {CONFIG_KEYS}; did you mean policy?"],
            id="typo-key",
        ),
        pytest.param(
            "log: {level: loud, format: xml}\n",
            [
                "log.level: expected one of debug, info, warning, error, critical, found 'loud'",
                "log.format: expected 'auto', 'json' or 'console', found 'xml'",
            ],
            id="two-errors-two-lines",
        ),
        pytest.param(
            "policy: nosuch\n",
            [
                "policy: unknown policy 'nosuch'; expected one of "
                "balloons, none, static, topology-aware"
            ],
            id="unknown-policy",
        ),
        pytest.param("- a\n- b\n", ["(document): expected a mapping, found list"], id="not-a-map"),
        pytest.param(
            "policy: ''\n",
            ["policy: expected a policy name, found an empty string"],
            id="empty-policy",
        ),
        pytest.param(
            "instrumentation: {httpEndpoint: 5}\n",
            ["instrumentation.httpEndpoint: expected a valid string, found 5"],
            id="wrong-type",
        ),
        pytest.param(
            "log: {levle: info}\n",
            [
                "log: unknown key levle; expected one of level, format, file, debug; "
                "did you mean level?"
            ],
            id="nested-typo",
        ),
        pytest.param(
            "control: {blockio: {classes: {slow: {devices: [{devices: [/etc/passwd], "
            "throttleReadBps: 99999999999999999999999T}]}}}}\n",
            [
                "control.blockio.classes.slow.devices[0].devices: expected a block device path "
                "or glob under /dev/; found '/etc/passwd'",
                "control.blockio.classes.slow.devices[0].throttleReadBps: expected a positive "
                "byte count like 50M or 1048576; found '99999999999999999999999T'",
            ],
            id="blockio-passwd-and-huge-rate",
        ),
    ],
)
def test_broken_configs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: list[str]
) -> None:
    assert errors_of(*run(tmp_path, text, capsys)) == expected


def test_every_error_of_every_layer_one_per_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A top-level unknown key hides nothing; the policy's problems come with their paths."""
    text = (
        "bogus: 1\n"
        "policy: topology-aware\n"
        "policyConfig:\n"
        "  pinCPUs: true\n"
        "  preferSharedCPUs: maybe\n"
        "  reservedResources: {cpu: 'cpuset:0-1,x,5-3'}\n"
    )
    assert errors_of(*run(tmp_path, text, capsys)) == [
        f"(document): unknown key bogus; expected one of {CONFIG_KEYS}",
        "policyConfig.preferSharedCPUs: expected a valid boolean, found 'maybe'",
        f"policyConfig: unknown key pinCPUs; expected one of {TA_KEYS}; did you mean pinCPU?",
        "policyConfig.reservedResources.cpu: id list '0-1,x,5-3': element 'x' is not an id or "
        "a range; expected e.g. '0-3,8'",
        "policyConfig.reservedResources.cpu: id list '0-1,x,5-3': range '5-3' is empty (it "
        "ends before it starts)",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "policy: static\npolicyConfig: {reservedSystemCPUs: '0-99'}\n",
            "policyConfig.reservedSystemCPUs: 0-99 includes CPUs 8-99 that are not online",
            id="static-reserved-off-machine",
        ),
        pytest.param(
            "policy: topology-aware\npolicyConfig: {pinCPU: maybe}\n",
            "policyConfig.pinCPU: expected a valid boolean, found 'maybe'",
            id="ta-bad-bool",
        ),
        pytest.param(
            "policy: topology-aware\npolicyConfig: {reservedResources: {cpu: lots}}\n",
            "policyConfig.reservedResources.cpu: 'lots' is not a CPU quantity",
            id="ta-bad-quantity",
        ),
        pytest.param(
            "policy: topology-aware\npolicyConfig: {reservedResources: {cpu: '0'}}\n",
            "policyConfig.reservedResources.cpu: expected a non-zero CPU amount, found '0'",
            id="ta-zero",
        ),
        pytest.param(
            "policyConfig: {reservedResources: {cpu: 1e400}}\n",
            "policyConfig.reservedResources.cpu: '1e400' is not a CPU quantity",
            id="1e400",
        ),
        pytest.param(
            "policyConfig: {reservedResources: {cpu: 'cpuset:0-4294967295'}}\n",
            "policyConfig.reservedResources.cpu: id list '0-4294967295': element "
            "'0-4294967295' has an id above",
            id="huge-cpuset",
        ),
    ],
)
def test_policy_config_errors_name_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    errors = errors_of(*run(tmp_path, text, capsys))
    assert len(errors) == 1
    assert errors[0].startswith(expected)


def test_valid_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "ok.yaml"
    f.write_text("policy: topology-aware\npolicyConfig: {reservedResources: {cpu: 750m}}\n")
    assert main(["validate-config", str(f), "--topology", TOPO]) == 0
    assert capsys.readouterr().out.strip() == f"{f}: valid"


def test_unreadable_and_broken_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert errors_of(*run_file(tmp_path / "missing.yaml", capsys)) == [
        "cannot open: No such file or directory"
    ]
    (error,) = errors_of(*run(tmp_path, "policy: [unclosed\n", capsys))
    assert error.startswith("expected YAML or JSON, found an error: while parsing")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(
            b"policy: none\nlog: {level: '\xff'}\n",
            ["expected UTF-8 text, found byte 0xff at offset 27 (line 2)"],
            id="not-utf8",
        ),
        pytest.param(
            b"[" * 10_000 + b"]" * 10_000,
            ["expected nesting at most 64 levels deep, found deeper"],
            id="10000-deep-json",
        ),
        pytest.param(
            b"a:\n" + b"".join(b"  " * i + b"- \n" for i in range(1, 200)),
            ["line 65: expected nesting at most 64 levels deep, found deeper"],
            id="200-deep-yaml",
        ),
        pytest.param(
            b"x: " + b"[" * 10_000 + b"]" * 10_000,
            ["line 1: expected nesting at most 64 levels deep, found deeper"],
            id="10000-deep-yaml-flow",
        ),
        pytest.param(
            b"policyConfig: {reservedResources: {cpu: .inf}}\n",
            ["policyConfig.reservedResources.cpu: expected a finite number, found inf"],
            id="inf",
        ),
        pytest.param(
            b"policyConfig: {reservedResources: {cpu: .nan}}\n",
            ["policyConfig.reservedResources.cpu: expected a finite number, found nan"],
            id="nan",
        ),
        pytest.param(
            b"log: {level: 1.0e+400}\n",
            ["log.level: expected a finite number, found inf"],
            id="1e400-float",
        ),
        pytest.param(
            b"control: {rdt: {enable: 99999999999999999999}}\n",
            [
                "control.rdt.enable: expected a number of magnitude at most 2**63-1, "
                "found 99999999999999999999"
            ],
            id="int-beyond-64-bits",
        ),
        pytest.param(
            b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + b"".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n".encode()
                for i in range(8)
            ),
            ["expected at most 200000 values (aliases counted as what they repeat), found more"],
            id="billion-laughs",
        ),
        pytest.param(
            b"control: &a {rdt: *a}\n",
            [
                "line 1: expected aliases to finished values, found *a inside the value it "
                "names (a recursive value)"
            ],
            id="recursive-alias",  # walking the value hung before (issue 28, wt-mem)
        ),
    ],
)
def test_hostile_documents_end_in_error_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: list[str]
) -> None:
    f = tmp_path / "hostile.yaml"
    f.write_bytes(content)
    assert errors_of(*run_file(f, capsys)) == expected


def test_dev_zero_is_refused_before_reading(capsys: pytest.CaptureFixture[str]) -> None:
    assert errors_of(*run_file(Path("/dev/zero"), capsys)) == [
        "expected a regular file, found a character device"
    ]


def test_a_large_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "big.yaml"
    f.write_text("# " + "x" * (1 << 20) + "\n")
    assert errors_of(*run_file(f, capsys)) == ["expected at most 1048576 bytes, found more"]


def test_a_fifo_does_not_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result: list[tuple[int, list[str]]] = []
    worker = threading.Thread(target=lambda: result.append(run_file(fifo, capsys)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():  # unblock the reader so the thread ends, then fail
        with open(fifo, "wb"):
            pass
        worker.join(timeout=5)
        pytest.fail("validate-config blocked on a FIFO")
    assert errors_of(*result[0]) == ["expected a regular file, found a FIFO"]


def test_built_in_policy_does_not_run_policy_dirs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    marker = tmp_path / "ran"
    (plugins / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    f = tmp_path / "c.yaml"
    f.write_text(f"policy: topology-aware\npolicyDirs: [{plugins}, {tmp_path / 'nosuch'}]\n")
    assert errors_of(*run_file(f, capsys)) == [
        f"policyDirs[1]: expected a directory, found '{tmp_path / 'nosuch'}'"
    ]
    assert not marker.exists()


def test_a_drop_in_policy_is_loaded_from_policy_dirs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(f"policy: nosuch\npolicyDirs: [{REPO / 'plugins.d'}]\n")
    (error,) = errors_of(*run_file(f, capsys))
    assert error.startswith("policy: unknown policy 'nosuch'; expected one of ")
    assert "topology-aware" in error


def test_real_process_ends_in_lines_not_a_traceback(tmp_path: Path) -> None:
    """The installed entry point, as a user runs it, on a hostile file."""
    f = tmp_path / "deep.json"
    f.write_text('{"a": ' * 5000 + "1" + "}" * 5000)
    proc = subprocess.run(
        [sys.executable, "-m", "nri_resmgr.cli", "validate-config", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"{f}: expected nesting at most 64 levels deep, found deeper",
        f"{f}: 1 error(s)",
    ]
