"""bench.goals' verdicts and formatting: which rows meet their target and how that reads.

No timing here: the rows are built from fixed numbers.
"""

from __future__ import annotations

import pytest

from bench.goals import BY_KEY, GOALS, Measured, line, markdown, summary


def test_every_row_of_issues_17_and_25_is_a_goal() -> None:
    assert [g.key for g in GOALS] == [
        "noop-rtt",
        "create-1000",
        "exclusive-cpu-1000",
        "sync-1000",
        "prereg-start",
        "restart-1000",
        "rss-1000",
        "shared-growth",
        "exclusive-growth",
        "affinity-1000",
        "sync-growth",
        "balloons-4k",
    ]
    assert {g.key: (g.target, g.on) for g in GOALS} == {
        "noop-rtt": (1.15, "ratio"),
        "create-1000": (1.5, "ratio"),
        "exclusive-cpu-1000": (3.0, "value"),
        "sync-1000": (100.0, "value"),
        "prereg-start": (0.25, "value"),
        "restart-1000": (0.3, "value"),
        "rss-1000": (40.0, "value"),
        "shared-growth": (1.3, "ratio"),
        "exclusive-growth": (1.3, "ratio"),
        "affinity-1000": (1.5, "ratio"),
        "sync-growth": (11.0, "ratio"),
        "balloons-4k": (4.0, "ratio"),
    }


def test_a_ratio_goal_is_judged_on_the_ratio_not_the_value() -> None:
    met = Measured(BY_KEY["noop-rtt"], value=230.0, peer=200.0)  # 1.15x: exactly the bound
    short = Measured(BY_KEY["noop-rtt"], value=300.0, peer=200.0)  # 1.5x
    assert met.ok
    assert met.ratio == pytest.approx(1.15)
    assert not short.ok
    assert short.factor == pytest.approx(1.5 / 1.15)


def test_a_value_goal_ignores_the_peer() -> None:
    m = Measured(BY_KEY["sync-1000"], value=99.0, peer=10.0)  # 9.9x the Go peer, under 100 ms
    assert m.ok
    assert m.ratio == pytest.approx(9.9)
    assert not Measured(BY_KEY["sync-1000"], value=101.0).ok


def test_a_ratio_goal_without_a_peer_value_says_so() -> None:
    with pytest.raises(ValueError, match=r"noop-rtt.*no positive peer value.*None"):
        _ = Measured(BY_KEY["noop-rtt"], value=1.0).ok


def test_line_shows_value_peer_ratio_target_and_verdict() -> None:
    text = line(Measured(BY_KEY["create-1000"], value=480.0, peer=160.0))
    assert text.split()[0] == "create-1000"
    assert "480 µs" in text and "160 µs" in text and "3.00x" in text
    assert "<= 1.50x" in text
    assert text.endswith("short (2.00x the target)")
    ok = line(Measured(BY_KEY["exclusive-cpu-1000"], value=2.5))
    assert ok.endswith("<= 3.00 ms  ok")
    assert " - " in ok  # no Go peer for an in-process decision


def test_summary_counts_and_names_the_short_rows() -> None:
    rows = [
        Measured(BY_KEY["rss-1000"], value=39.0),
        Measured(BY_KEY["sync-1000"], value=250.0),
        Measured(BY_KEY["prereg-start"], value=0.5),
    ]
    assert summary(rows) == "goals: 1 of 3 ok; short: sync-1000 (2.50x), prereg-start (2.00x)"
    assert summary(rows[:1]) == "goals: 1 of 1 ok"


def test_markdown_has_one_row_per_goal() -> None:
    table = markdown([Measured(BY_KEY["rss-1000"], value=45.0, peer=15.0)]).splitlines()
    assert len(table) == 3
    assert table[2] == (
        "| RSS after 1,000 live containers | 45.0 MiB | 15.0 MiB | 3.00x | <= 40.0 MiB "
        "| **short** (1.12x) |"
    )
