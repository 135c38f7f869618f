"""The daemon's /metrics and probes after a known sequence of NRI events."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nri_api.errors import RPCError
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.metrics import serve_http
from nri_resmgr.topology.model import Topology
from tests.support.daemon import daemon_session, http_get
from tests.support.messages import ctr, guaranteed, pod


def _samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_scrape_after_known_sequence(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, plugin, _):
            server = await serve_http(plugin.metrics, plugin.health, host="127.0.0.1", port=0)
            port = server.sockets[0].getsockname()[1]
            try:
                assert (await http_get(port, "/readyz"))[0] == 200
                web, db = pod("web", QoSClass.BURSTABLE), pod("db", QoSClass.GUARANTEED)
                await rt.run_pod_sandbox(web)
                await rt.run_pod_sandbox(db)
                await rt.create_container(web, ctr(web, "app", cpu="500m"))
                await rt.create_container(db, guaranteed(db, "pg", "2"))
                with pytest.raises(RPCError):
                    await rt.create_container(db, guaranteed(db, "hog", "8"))
                await rt.stop_container(web, ctr(web, "app", cpu="500m"))
                s = _samples((await http_get(port, "/metrics"))[1])
            finally:
                server.close()
                await server.wait_closed()
            ev = "nri_resmgr_events_total"
            assert s[(ev, (("event", "CreateContainer"), ("outcome", "ok")))] == 2
            assert s[(ev, (("event", "CreateContainer"), ("outcome", "error")))] == 1
            assert s[(ev, (("event", "RunPodSandbox"), ("outcome", "ok")))] == 2
            assert s[(ev, (("event", "StopContainer"), ("outcome", "ok")))] == 1
            assert s[("nri_resmgr_errors_total",
                      (("event", "CreateContainer"), ("kind", "AllocationError")))] == 1
            assert s[("nri_resmgr_event_latency_seconds_count",
                      (("event", "CreateContainer"),))] == 3
            # after the stop only the database lives: one exclusive container of 2 CPUs
            assert s[("nri_resmgr_containers", (("kind", "exclusive"),))] == 1
            assert ("nri_resmgr_containers", (("kind", "shared"),)) not in s
            pools = {k[1][0][1]: v for k, v in s.items()
                     if k[0] == "nri_resmgr_pool_exclusive_cpus"}
            assert sum(pools.values()) == 2

    asyncio.run(asyncio.wait_for(scenario(), 60))
