"""`nri-resmgr explain --url` against a daemon over a real socket: the last decision the
daemon recorded per live container, kept across a reconfiguration."""

from __future__ import annotations

import asyncio

import pytest

from nri_resmgr.cli import main
from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.metrics import serve_http
from nri_resmgr.runtime.process import node_lookups, node_pages
from nri_resmgr.topology.model import Topology
from tests.support.daemon import daemon_session, http_get
from tests.support.messages import ctr, guaranteed, pod


def test_explain_reads_the_daemons_record(
    topology: Topology, capsys: pytest.CaptureFixture[str]
) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, plugin, _):  # static, CPU 0 reserved
            server = await serve_http(
                plugin.metrics,
                plugin.health,
                host="127.0.0.1",
                port=0,
                pages=node_pages(plugin),
                lookups=node_lookups(plugin),
            )
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            try:
                web, db = pod("web", QoSClass.BURSTABLE), pod("db", QoSClass.GUARANTEED)
                await rt.run_pod_sandbox(web)
                await rt.run_pod_sandbox(db)
                await rt.create_container(web, ctr(web, "app", cpu="500m"))
                await rt.create_container(db, guaranteed(db, "pg", "2"))
                # a reconfiguration keeps the record (the pipeline is rebuilt)
                plugin.apply_config(
                    config_from_mapping(
                        {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0"}}
                    )
                )
                # its decision lines are written in the loop's next turn (after the reply,
                # as every event's): let them out before the explain output is read
                await asyncio.sleep(0)
                capsys.readouterr()
                assert await asyncio.to_thread(main, ["explain", "db/pg", "--url", url]) == 0
                pg = capsys.readouterr().out.splitlines()
                assert await asyncio.to_thread(main, ["explain", "web", "--url", url]) == 0
                app = capsys.readouterr().out.splitlines()
                code = await asyncio.to_thread(main, ["explain", "nosuch", "--url", url])
                missing = capsys.readouterr().err
            finally:
                server.close()
                await server.wait_closed()
            assert pg[0] == "container default/db/pg"
            assert pg[1].startswith("  create at ")
            assert (
                pg[2] == "  decision: exclusive in exclusive, cpus 1,5, mems - (2 exclusive CPUs)"
            )
            assert pg[3] == "  updated 1 other containers: web/app"
            # placed now (static: no pools to rank), the same two CPUs
            assert pg[4] == "  placed now, the others as they are:"
            assert "    decision: exclusive in exclusive, cpus 1,5, mems - (2 exclusive CPUs)" in pg
            assert app[0] == "container default/web/app"
            assert app[2].startswith("  decision: shared in shared, cpus 0-7")
            assert code == 2 and "nosuch: expected a live container of that pod" in missing
            assert len(plugin.decisions) == 2

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_explain_names_the_pool_and_the_components_that_decided_it(
    topology: Topology, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "policy": "topology-aware",
        "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}},
    }

    async def scenario() -> None:
        async with daemon_session(topology, config) as (rt, plugin, _):
            server = await serve_http(
                plugin.metrics,
                plugin.health,
                host="127.0.0.1",
                port=0,
                pages=node_pages(plugin),
                lookups=node_lookups(plugin),
            )
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            try:
                db = pod("db", QoSClass.GUARANTEED)
                await rt.run_pod_sandbox(db)
                await rt.create_container(db, guaranteed(db, "pg", "2"))
                capsys.readouterr()
                assert await asyncio.to_thread(main, ["explain", "db", "--url", url]) == 0
                out = capsys.readouterr().out.splitlines()
                status, _ = await http_get(server.sockets[0].getsockname()[1], "/explain/nosuch")
            finally:
                server.close()
                await server.wait_closed()
            assert status == 404
            decided = [ln for ln in out if ln.startswith("  decision: ")]
            assert decided and decided[0].startswith("  decision: exclusive in root, cpus 1,5")
            assert any(ln.startswith("    read as: 2 exclusive CPUs") for ln in out), out
            (winner,) = [ln for ln in out if ln.endswith("winner cpus 1,5")]
            assert winner.split()[0] == "root"

    asyncio.run(asyncio.wait_for(scenario(), 60))
