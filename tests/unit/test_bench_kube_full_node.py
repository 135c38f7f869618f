"""bench.kube_full_node: its interleaving plan and statistics (the run itself needs root)."""

from __future__ import annotations

import pytest

from bench.kube_full_node import (
    HEADROOM,
    WITH,
    WITHOUT,
    Phase,
    manifest,
    plan,
    ratios,
    spec,
    summarize,
    table,
)


def test_plan_interleaves_abba_and_gives_each_mode_one_phase_a_round() -> None:
    assert plan(1) == [WITH, WITHOUT]
    assert plan(2) == [WITH, WITHOUT, WITHOUT, WITH]
    assert plan(3) == [WITH, WITHOUT, WITHOUT, WITH, WITH, WITHOUT]
    assert plan(5).count(WITH) == plan(5).count(WITHOUT) == 5


def test_plan_refuses_no_rounds_naming_what_it_expected() -> None:
    with pytest.raises(ValueError, match="rounds: expected at least 1, found 0"):
        plan(0)


def _phase(mode: str, starts: dict[str, tuple[float, float | None]]) -> Phase:
    posted = {n: t for n, (t, _) in starts.items()}
    running = {n: r for n, (_, r) in starts.items() if r is not None}
    stuck = {n: "ContainerCreating" for n in posted if n not in running}
    return Phase(mode, posted, running, stuck)  # type: ignore[arg-type]


def test_a_phase_measures_from_each_post_and_from_the_first_post_to_the_last_running() -> None:
    p = _phase(WITH, {"a": (10.0, 12.0), "b": (11.0, 15.5), "c": (12.0, 13.0)})
    assert sorted(p.starts()) == [1.0, 2.0, 4.5]
    assert p.all_running() == 5.5
    short = _phase(WITH, {"a": (10.0, 12.0), "b": (11.0, None)})
    assert short.starts() == [2.0]
    assert short.all_running() is None


def test_summarize_pools_each_modes_starts_and_takes_the_median_of_its_phases() -> None:
    phases = [
        _phase(WITH, {f"p{i}": (0.0, 1.0 + i) for i in range(10)}),  # starts 1..10
        _phase(WITHOUT, {f"p{i}": (0.0, 1.0 + i / 2) for i in range(10)}),  # 1..5.5
        _phase(WITHOUT, {f"p{i}": (0.0, 2.0) for i in range(10)}),
        _phase(WITH, {f"p{i}": (0.0, 11.0 + i) for i in range(10)}),  # starts 11..20
    ]
    s = summarize(phases)
    assert s[WITH]["phases"] == 2 and s[WITH]["pods"] == s[WITH]["running"] == 20
    assert s[WITH]["start_p50"] == 10.0  # nearest rank over the 20 pooled
    assert s[WITH]["start_p99"] == 20.0
    assert s[WITH]["all_running"] == [10.0, 20.0]
    assert s[WITH]["all_running_median"] == 15.0
    assert s[WITHOUT]["all_running_median"] == (5.5 + 2.0) / 2
    r = ratios(s)
    assert r["start_p50"] == round(10.0 / s[WITHOUT]["start_p50"], 3)
    assert r["all_running_median"] == round(15.0 / 3.75, 3)
    text = table(s, r)
    assert "| nri-resmgr | 2 | 20/20 |" in text and "| ratio |" in text


def test_a_phase_that_fell_short_leaves_no_median_and_no_ratio() -> None:
    phases = [
        _phase(WITH, {"a": (0.0, 1.0), "b": (0.0, None)}),
        _phase(WITHOUT, {"a": (0.0, 1.0), "b": (0.0, 2.0)}),
    ]
    s = summarize(phases)
    assert s[WITH]["running"] == 1 and s[WITH]["all_running_median"] is None
    assert ratios(s)["all_running_median"] is None
    assert ratios(s)["start_p50"] == 1.0


def test_pods_fit_two_cpus_and_the_node_admits_them_beside_the_daemon() -> None:
    docs = [manifest(i) for i in range(110)]
    assert len({d["metadata"]["name"] for d in docs}) == 110
    cpu = [d["spec"]["containers"][0]["resources"].get("requests", {}).get("cpu") for d in docs]
    assert cpu.count(None) == 55 and cpu.count("10m") == 55  # BestEffort and Burstable
    assert all("limits" not in d["spec"]["containers"][0]["resources"] for d in docs)
    assert spec(110).max_pods == 110 + HEADROOM > 110
