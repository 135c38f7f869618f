"""The soak's and the upgrade measurement's judges (tests/e2e_kube/churn.py), on made-up
input: each invariant broken once, and containerd's log read into windows."""

from __future__ import annotations

from tests.e2e_kube.churn import Seen, plugin_windows, slowest_bucket, violations

ONLINE = frozenset({0, 1})


def seen(name: str, cpus: set[int], exclusive: int = 0) -> Seen:
    return Seen(name, frozenset(cpus), exclusive)


def test_a_placed_node_has_no_violation() -> None:
    assert violations([seen("g", {1}, 1), seen("b", {0}), seen("e", {0})], ONLINE) == []
    assert violations([seen("b", {0, 1}), seen("e", {0, 1})], ONLINE) == []


def test_a_cpu_exclusive_to_two_containers() -> None:
    (v,) = violations([seen("g1", {1}, 1), seen("g2", {1}, 1)], ONLINE)
    assert v == "CPU 1: exclusive to both g1 and g2"


def test_an_exclusive_container_left_on_every_cpu() -> None:
    out = violations([seen("g", {0, 1}, 1)], ONLINE)
    assert out == ["g: expected 1 exclusive CPU(s); found cpuset 0,1"]


def test_a_shared_container_on_an_exclusive_cpu() -> None:
    (v,) = violations([seen("g", {1}, 1), seen("b", {0, 1})], ONLINE)
    assert v == "b (shared): on exclusive CPU(s) 1 of g"


def test_a_shared_container_off_the_shared_pool() -> None:
    (v,) = violations([seen("b", {1})], ONLINE)
    assert v == "b (shared): expected the shared pool 0,1; found cpuset 1"


def _line(t: str, msg: str) -> str:
    return f'time="2026-11-27T11:03:{t}Z" level=info msg="{msg}"'


def _created(name: str, cid: str) -> str:
    sandbox = 'CreateContainer within sandbox \\"x\\"'
    return f'{sandbox} for name:\\"{name}\\" returns container id \\"{cid}\\"'


LOG = "\n".join(
    [
        _line("10.000000000", 'plugin \\"90-resmgr\\" connected and synchronized'),
        _line("13.500000000", 'connection to plugin \\"90-resmgr\\" closed'),
        _line("14.000000000", _created("c", "a")),
        _line("14.100000000", _created("nri-resmgr", "d")),
        _line(
            "14.500000000",
            "CreateContainer within sandbox failed: validator rejected container adjustment",
        ),
        _line("15.250000000", 'plugin \\"90-resmgr\\" connected and synchronized'),
        _line("16.000000000", _created("c", "b")),
        _line("20.000000000", 'plugin \\"90-resmgr\\" connected and synchronized'),
        _line("21.000000000", 'connection to plugin \\"90-resmgr\\" closed'),
        _line("22.000000000", 'connection to plugin \\"90-resmgr\\" closed'),
    ]
)


def test_windows_from_containerds_log() -> None:
    first, *rest = plugin_windows(LOG, "90-resmgr")
    assert round(first.seconds, 3) == 1.75
    # the daemon's own container (its pod is exempt from the validator) is not counted
    assert (first.created, first.refused) == (1, 1)
    # two instances connected (a hand-over's overlap): the first close leaves one
    # connected, so the window opens at the second close, and stays open to the end
    (last,) = rest
    assert round(last.seconds, 3) == 0.0 and last.created == 0


def test_the_slowest_bucket_is_the_top_one_with_observations() -> None:
    metrics = "\n".join(
        [
            'nri_resmgr_event_latency_seconds_bucket{event="CreateContainer",le="0.01"} 3',
            'nri_resmgr_event_latency_seconds_bucket{event="CreateContainer",le="0.05"} 5',
            'nri_resmgr_event_latency_seconds_bucket{event="CreateContainer",le="0.1"} 5',
            'nri_resmgr_event_latency_seconds_bucket{event="CreateContainer",le="+Inf"} 5',
        ]
    )
    assert slowest_bucket(metrics) == 0.05
    assert slowest_bucket("") == 0.0
