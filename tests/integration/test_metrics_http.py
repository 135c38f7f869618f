"""The metrics and health endpoints over a real TCP socket."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from nri_resmgr.ops.metrics import HealthState, Metrics, PoolSnapshot, StateSnapshot, serve_http
from tests.support.daemon import http_get


def _samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_scrape_after_known_events_and_probes() -> None:
    async def scenario() -> None:
        metrics, health = Metrics(), HealthState()
        server = await serve_http(metrics, health, host="127.0.0.1", port=0)
        port = server.sockets[0].getsockname()[1]
        try:
            assert (await http_get(port, "/healthz"))[0] == 200
            status, body = await http_get(port, "/readyz")
            assert status == 503 and b"not connected" in body
            for _ in range(3):
                metrics.observe_event("CreateContainer", 0.002)
            metrics.observe_event("CreateContainer", 0.004, error="AllocationError")
            metrics.observe_event("RemoveContainer", 0.0001)
            metrics.observe_state(
                StateSnapshot(
                    pools=(PoolSnapshot("node0", 8, 5, 3, 4),),
                    containers_by_kind={"exclusive": 1, "shared": 3},
                )
            )
            health.registered = health.synchronized = True
            assert (await http_get(port, "/readyz"))[0] == 200
            status, body = await http_get(port, "/metrics")
            assert status == 200
            s = _samples(body)
            ev = "nri_resmgr_events_total"
            assert s[(ev, (("event", "CreateContainer"), ("outcome", "ok")))] == 3
            assert s[(ev, (("event", "CreateContainer"), ("outcome", "error")))] == 1
            assert s[(ev, (("event", "RemoveContainer"), ("outcome", "ok")))] == 1
            assert (
                s[
                    (
                        "nri_resmgr_errors_total",
                        (("event", "CreateContainer"), ("kind", "AllocationError")),
                    )
                ]
                == 1
            )
            assert (
                s[("nri_resmgr_event_latency_seconds_count", (("event", "CreateContainer"),))] == 4
            )
            assert s[("nri_resmgr_pool_shared_cpus", (("pool", "node0"),))] == 5
            assert s[("nri_resmgr_containers", (("kind", "shared"),))] == 3
            # a later snapshot replaces the gauges: pools that vanished are gone
            metrics.observe_state(StateSnapshot())
            s = _samples((await http_get(port, "/metrics"))[1])
            assert ("nri_resmgr_pool_shared_cpus", (("pool", "node0"),)) not in s
            assert (await http_get(port, "/nope"))[0] == 404
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_registries_are_independent() -> None:
    a, b = Metrics(), Metrics()
    a.observe_event("CreateContainer", 0.1)
    assert b"CreateContainer" not in b.exposition()


def test_rdt_gauges_are_read_at_each_scrape() -> None:
    from nri_resmgr.control.resctrl import MonSample

    readings: list[MonSample] = []
    calls = []

    def read() -> list[MonSample]:
        calls.append(1)
        return list(readings)

    async def scenario() -> None:
        metrics = Metrics()
        metrics.rdt_refresh = read
        server = await serve_http(metrics, HealthState(), host="127.0.0.1", port=0)
        port = server.sockets[0].getsockname()[1]
        try:
            body = (await http_get(port, "/metrics"))[1]
            assert b"nri_l3_" not in body  # nothing monitored: no families at all
            readings.append(MonSample("gold", "nri-resmgr-pod-u1", 0, 4096, 300, 200))
            readings.append(MonSample("system/default", "", 1, None, 7, 5))
            s = _samples((await http_get(port, "/metrics"))[1])
            labels = (
                ("cache_id", "0"),
                ("rdt_class", "gold"),
                ("rdt_mon_group", "nri-resmgr-pod-u1"),
            )
            assert s[("nri_l3_llc_occupancy", labels)] == 4096
            assert s[("nri_l3_mbm_local_bytes", labels)] == 200
            assert s[("nri_l3_mbm_total_bytes", labels)] == 300
            root = (("cache_id", "1"), ("rdt_class", "system/default"), ("rdt_mon_group", ""))
            assert s[("nri_l3_mbm_total_bytes", root)] == 7
            assert ("nri_l3_llc_occupancy", root) not in s  # "Unavailable" is no value
            # a group that went away leaves no stale sample
            readings.pop(0)
            s = _samples((await http_get(port, "/metrics"))[1])
            assert ("nri_l3_llc_occupancy", labels) not in s
            assert len(calls) == 3
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
