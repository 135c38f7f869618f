"""bench.balloons: its three decision kinds are measured on any machine it names."""

from __future__ import annotations

from bench.balloons import CONFIG, KINDS, MACHINES, measure, table
from nri_resmgr.topology.load import load_topology


def test_measure_reports_every_kind_with_its_samples() -> None:
    topo = load_topology(MACHINES["224t"])
    got = measure(
        topo, live_count=20, samples=3, warmup=1, policy="topology-aware",
        config={"reservedResources": CONFIG["reservedResources"]},
    )  # fmt: skip
    assert got["cpus"] == 224
    for kind in KINDS:
        assert got[kind]["n"] == 3 and got[kind]["cpu"]["n"] == 3, (kind, got[kind])
        assert got[kind]["p50_us"] > 0
    text = table({"1k": {**got, "cpus": 1024}, "4k": {**got, "cpus": 4096}}, 20)
    assert "growth 1k -> 4k CPUs" in text and "CPUs grew 4x" in text


def test_synthetic_machines_have_the_cpu_counts_the_table_names() -> None:
    sizes = {name: len(load_topology(MACHINES[name]).cpus) for name in ("1k", "2k", "4k")}
    assert sizes == {"1k": 1024, "2k": 2048, "4k": 4096}


def test_the_kinds_are_what_they_say_with_balloons() -> None:
    # inflate and deflate resize grow[0], so its anchor container is updated each time;
    # a new balloon of its own moves nobody
    got = measure(load_topology(MACHINES["224t"]), live_count=30, samples=2, warmup=0)
    assert {k: got[k]["updates"] for k in KINDS} == {"inflate": 1, "deflate": 1, "new": 0}
