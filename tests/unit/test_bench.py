"""The benchmark helpers that turn samples into numbers: percentiles and profile summaries."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from bench import scale
from bench.common import settled_cpu_ns
from bench.peers import compile_bytecode
from bench.profile import layer_of, parse, summarize
from bench.scale import GO, OURS, added_ms, decision_growth, growth, own_cpu_ms, round_p50s
from bench.stats import percentile, summary_us


@pytest.mark.parametrize(
    ("q", "expected"),
    [(50, 50.0), (99, 99.0), (100, 100.0), (1, 1.0), (0, 1.0)],
    ids=["p50", "p99", "p100", "p1", "p0"],
)
def test_percentile_nearest_rank(q: float, expected: float) -> None:
    assert percentile([float(v) for v in range(100, 0, -1)], q) == expected


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_summary_is_in_microseconds() -> None:
    s = summary_us([1000, 2000, 3000])
    assert s == {"n": 3, "p50_us": 2.0, "p99_us": 3.0, "mean_us": 2.0}


RAW = """\
process 1:"python";<module> (noop.py:1);_run_once (/usr/lib/python3.11/asyncio/base_events.py:1845);select (/usr/lib/python3.11/selectors.py:451) 70
process 1:"python";<module> (noop.py:1);_run_once (/usr/lib/python3.11/asyncio/base_events.py:1845);_handle (/w/nri_api/transport.py:292);dispatch (/w/nri_api/dispatch.py:282) 20
process 1:"python";<module> (noop.py:1);_run_once (/usr/lib/python3.11/asyncio/base_events.py:1845);_read_loop (/w/nri_api/transport.py:229);_process (/w/nri_api/transport.py:245);next_event (/w/nri_api/mux.py:80) 10
"""  # noqa: E501


def test_profile_drops_epoll_waits_and_splits_by_layer() -> None:
    summary = summarize(parse(RAW.splitlines()))
    assert summary["samples"] == 30
    layers = summary["layers"]
    assert layers == {
        "nri_api stub dispatch + hook": 20,
        "nri_api mux + ttrpc framing (sans-IO)": 10,
    }
    steps = summary["steps"]
    assert steps["handling: Trunk._handle (task per request)"] == 20  # type: ignore[index]
    assert steps["  stub dispatch (decode, hook, encode)"] == 20  # type: ignore[index]
    assert steps["reading: Trunk._read_loop (recv + mux + ttrpc parse)"] == 10  # type: ignore[index]


def test_layer_of_unknown_code_is_other() -> None:
    assert layer_of("f", "/somewhere/else.py") == "other (interpreter, stdlib)"


def test_containerd_log_time_keeps_microseconds() -> None:
    from tests.e2e.containerd import log_time

    line = 'time="2026-11-23T07:51:38.123456789Z" level=info msg="plugin registered"'
    assert log_time(line) == pytest.approx(1795420298.123456, abs=1e-6)
    assert log_time('time="2026-11-23T07:51:38Z" level=info') == 1795420298.0
    assert log_time("no stamp here") is None
    assert log_time('time="yesterday"') is None


def test_log_cursor_reads_only_new_lines_and_fails_on_sync_errors(tmp_path: Path) -> None:
    from bench.rt_peers import LogCursor

    log = tmp_path / "containerd.log"
    log.write_text('time="2026-11-23T07:00:00.5Z" msg="plugin \\"10-a\\" registered"\n')
    cursor = LogCursor(log)  # starts at the end: the old line does not count
    with open(log, "a") as f:
        f.write('time="2026-11-23T07:00:01.25Z" msg="synchronizing plugin 10-a"\n')
        f.write('time="2026-11-23T07:00:02Z" msg="plugin \\"10-a\\" connected"\n')
    seen = cursor.wait_for("synchronizing plugin 10-a", '\\"10-a\\" connected', timeout=5)
    assert seen['\\"10-a\\" connected'] - seen["synchronizing plugin 10-a"] == 0.75
    with pytest.raises(RuntimeError, match="never logged"):
        cursor.wait_for("registered", timeout=0.05)
    with open(log, "a") as f:
        f.write('time="2026-11-23T07:00:03Z" msg="failed to synchronize plugin: deadline"\n')
    with pytest.raises(RuntimeError, match="failed to synchronize plugin: deadline"):
        cursor.wait_for("never", timeout=5)


def test_containerd_rt_table_renders_without_a_skipped_peer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--skip nri-plugins` (as on the CRI-O run): the tables drop its column instead of
    failing with KeyError on the missing peer."""
    from bench import containerd_rt as rt

    monkeypatch.setattr(rt, "PEERS", ("none", "go-noop", "nri-resmgr"))
    monkeypatch.setattr(rt, "PLUGINS", ("go-noop", "nri-resmgr"))
    probe = {"n": 3, "p50_us": 2000.0, "p99_us": 3000.0, "mean_us": 2100.0, "over_2s": 0,
             "failed": 0, "errors": []}  # fmt: skip
    result = {
        "release": "crio 1.36.3",
        "samples": 3,
        "levels": {
            "10": {
                "none": probe, "go-noop": probe, "nri-resmgr": probe,
                "sync_ms": {"go-noop": [1.0], "nri-resmgr": [2.0]},
                "sync_errors": {"go-noop": [], "nri-resmgr": []},
                "rss_kib": {"go-noop": 1024, "nri-resmgr": 2048},
                "load": "load 1 on 2 CPUs",
            }
        },
        "startup_ms": {"external": {"go-noop": [1.0], "nri-resmgr": [2.0]},
                       "preregistered": {"nri-resmgr": [3.0]}},
    }  # fmt: skip
    text = rt.table(result)
    assert "nri-plugins |" not in text.replace("nri-resmgr / nri-plugins |", "")
    assert "| live | no plugin | go-noop | nri-resmgr |" in text
    assert "|    10 | 1.0 | 2.0 | n/a |" in text


def test_compile_bytecode_writes_it_even_where_python_would_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the agents' shells set PYTHONDONTWRITEBYTECODE; the start-up rows must not pay for it
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    sources = [tmp_path / "nri_api" / "a.py", tmp_path / "nri_resmgr" / "sub" / "b.py"]
    for src in sources:
        src.parent.mkdir(parents=True)
        src.write_text("X = 1\n")
    compile_bytecode(tmp_path)
    for src in sources:
        assert Path(importlib.util.cache_from_source(str(src))).is_file(), src


def test_compile_bytecode_names_the_package_that_does_not_compile(tmp_path: Path) -> None:
    (tmp_path / "nri_api").mkdir()
    (tmp_path / "nri_resmgr").mkdir()
    (tmp_path / "nri_resmgr" / "broken.py").write_text("def (:\n")
    with pytest.raises(RuntimeError, match=r"compiling .*nri_resmgr: expected every module"):
        compile_bytecode(tmp_path)


def test_synchronize_growth_beyond_the_go_noop_is_the_difference_of_medians() -> None:
    """bench.scale's 'ours beyond it': what the daemon adds over the Go no-op at each level
    (the runtime's own share, in both, cancels out), then its growth."""
    first = {"median_ms": {OURS: 150.0, GO: 50.0}}
    last = {"median_ms": {OURS: 1_600.0, GO: 700.0}}
    assert added_ms(first) == 100.0
    assert added_ms(last) == 900.0
    assert growth(added_ms(first), added_ms(last)) == 9.0
    # a daemon no slower than the no-op adds nothing: its growth is not a number
    assert growth(added_ms({"median_ms": {OURS: 50.0, GO: 50.0}}), 900.0) == float("inf")


def test_the_daemons_own_synchronize_cpu_leaves_out_its_start_up() -> None:
    """bench.scale's 'the daemon's CPU': a level's CPU from exec until idle, less an empty
    node's (start-up, registration, Configure)."""
    empty = {"cpu_ms": 500.0}
    assert own_cpu_ms({"cpu_ms": 700.0}, empty) == 200.0
    assert (
        growth(own_cpu_ms({"cpu_ms": 700.0}, empty), own_cpu_ms({"cpu_ms": 2_300.0}, empty)) == 9.0
    )


def test_settled_cpu_waits_for_a_process_that_pauses_then_works_again() -> None:
    """bench.scale's own-CPU reading waits out a pause shorter than its quiet window: a
    child that sleeps 0.2 s, then burns 0.3 s of CPU, is read with that CPU in it."""
    code = (
        "import time\ntime.sleep(0.2)\nend = time.thread_time() + 0.3\n"
        "while time.thread_time() < end: pass\ntime.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        assert settled_cpu_ns(child.pid) >= 300_000_000
    finally:
        child.kill()
        child.wait()


def _round(shared: float, exclusive: float) -> dict[str, object]:
    return {"shared": {"cpu": {"p50_us": shared}}, "exclusive": {"cpu": {"p50_us": exclusive}}}


def test_decision_growth_is_of_the_rounds_medians_not_the_first_round() -> None:
    # a first round whose last level ran while the machine was slow (bench.scale's
    # rounds, seventh session): its growth alone is over, the medians' is not
    rounds = [
        {"1000": _round(300, 2000), "10000": _round(600, 40000)},
        {"1000": _round(320, 2100), "10000": _round(330, 20000)},
        {"1000": _round(310, 1900), "10000": _round(340, 21000)},
    ]
    p50s = round_p50s(rounds)
    assert p50s["10000"] == {"shared": [600, 330, 340], "exclusive": [40000, 20000, 21000]}
    assert decision_growth(p50s, "1000", "10000") == {
        "shared_cpu_p50": growth(310, 340),
        "exclusive_cpu_p50": growth(2000, 21000),
    }
    assert decision_growth(round_p50s(rounds[:1]), "1000", "10000")["shared_cpu_p50"] == 2.0


def test_synchronize_levels_runs_the_levels_in_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[tuple[int, str]] = []

    def run(self: scale._SyncLevel, p: object, name: str) -> None:
        runs.append((self.n, name))
        self.ms[name].append(float(self.n))
        if name == OURS:
            self.rss.append(1024)
            self.cpu.append(1_000_000)

    monkeypatch.setattr(scale._SyncLevel, "run", run)
    got = scale.synchronize_levels(None, [0, 10, 20], reps=3, seed=1)  # type: ignore[arg-type]
    # every round runs every level once, both peers each, before the next round starts
    for r in range(3):
        block = runs[6 * r : 6 * r + 6]
        assert sorted(block) == sorted((n, name) for n in (0, 10, 20) for name in (GO, OURS))
    assert got["20"]["median_ms"] == {GO: 20.0, OURS: 20.0} and got["0"]["cpu_ms"] == 1.0
