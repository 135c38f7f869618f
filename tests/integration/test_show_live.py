"""`nri-resmgr show --url` against a daemon over a real socket: the picture is the
daemon's state, and a stale picture is at most a second old."""

from __future__ import annotations

import asyncio
import json

import pytest

from nri_resmgr.cli import main
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.metrics import serve_http
from nri_resmgr.runtime.process import node_pages
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.view.model import Holder, view_from_dict
from tests.support.daemon import daemon_session
from tests.support.messages import ctr, guaranteed, pod


def test_show_reads_the_live_daemon(topology: Topology, capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> None:
        async with daemon_session(topology) as (rt, plugin, _):  # static, CPU 0 reserved
            server = await serve_http(
                plugin.metrics, plugin.health, host="127.0.0.1", port=0, pages=node_pages(plugin)
            )
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            try:
                web, db = pod("web", QoSClass.BURSTABLE), pod("db", QoSClass.GUARANTEED)
                await rt.run_pod_sandbox(web)
                await rt.run_pod_sandbox(db)
                await rt.create_container(web, ctr(web, "app", cpu="500m"))
                reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
                pg_cpus = reply.adjust.linux.resources.cpu.cpus
                code = await asyncio.to_thread(main, ["show", "--url", url, "--output", "json"])
                assert code == 0
                shown_json = capsys.readouterr().out
                text_code = await asyncio.to_thread(main, ["show", "--url", url])
                assert text_code == 0
            finally:
                server.close()
                await server.wait_closed()
            out = capsys.readouterr().out
            view = view_from_dict(json.loads(shown_json[shown_json.index("{\n") :]))
            assert view.policy == "static"
            assert view.cpus_of(Holder.RESERVED) == IDSet({0})
            (pg,) = [c for c in view.containers if c.name == "pg"]
            assert pg.cpus == pg_cpus == "1,5"
            assert view.cpus_of(Holder.EXCLUSIVE) == IDSet.parse(pg_cpus)
            assert "default/db/pg" in out and "1:c2,5:c2" in out

    asyncio.run(asyncio.wait_for(scenario(), 60))
