"""`nri-resmgr dump` from a daemon over a real socket, replayed by the simulator; and the
what-if of a new configuration, against the daemon applying it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nri_resmgr.cli import main
from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.metrics import serve_http
from nri_resmgr.runtime.process import node_pages
from nri_resmgr.simulator.results import SimulationResult
from nri_resmgr.simulator.run import quiet_log, run_scenario
from nri_resmgr.simulator.scenario import load_scenario
from nri_resmgr.topology.model import Topology
from tests.support.daemon import daemon_session
from tests.support.messages import ctr, guaranteed, pod


def ta(reserved: str) -> dict[str, Any]:
    return {"policy": "topology-aware", "policyConfig": {"reservedResources": {"cpu": reserved}}}


def test_dump_replays_every_cpuset_and_the_whatif_moves_what_applying_moves(
    topology: Topology, tmp_path: Path
) -> None:
    dump = tmp_path / "node.yaml"

    async def scenario() -> None:
        async with daemon_session(topology, ta("cpuset:0")) as (rt, plugin, _):
            server = await serve_http(
                plugin.metrics, plugin.health, host="127.0.0.1", port=0, pages=node_pages(plugin)
            )
            port = server.sockets[0].getsockname()[1]
            told: dict[str, tuple[str, str]] = {}
            names: dict[str, str] = {}
            try:
                for name, qos, cname, cpu in (
                    ("db", QoSClass.GUARANTEED, "pg", "2"),
                    ("one", QoSClass.GUARANTEED, "solo", "1"),
                    ("web", QoSClass.BURSTABLE, "nginx", "500m"),
                    ("batch", QoSClass.BEST_EFFORT, "worker", None),
                ):
                    sandbox = pod(name, qos)
                    sandbox.annotations["note"] = name
                    await rt.run_pod_sandbox(sandbox)
                    c = (
                        guaranteed(sandbox, cname, cpu)
                        if qos is QoSClass.GUARANTEED and cpu is not None
                        else ctr(sandbox, cname, cpu=cpu)
                    )
                    c.id = f"ctr-{name}"
                    reply = await rt.create_container(sandbox, c)
                    res = reply.adjust.linux.resources.cpu
                    told[c.id] = (res.cpus, res.mems)
                    for u in reply.update:
                        upd = u.linux.resources.cpu
                        told[u.container_id] = (upd.cpus, upd.mems or told[u.container_id][1])
                    names[c.id] = f"{name}/{c.name}"
                url = f"http://127.0.0.1:{port}"
                code = await asyncio.to_thread(main, ["dump", "--url", url, "-o", str(dump)])
                assert code == 0
                replay = run_scenario(load_scenario(dump), log=quiet_log())
                new = config_from_mapping(ta("cpuset:0-1"))
                whatif = run_scenario(load_scenario(dump), config=new, log=quiet_log())
                applied = {u.container_id: u.linux.resources.cpu for u in plugin.apply_config(new)}
            finally:
                server.close()
                await server.wait_closed()
            check_replay(replay, {names[c]: v for c, v in told.items()})
            check_whatif(whatif, {names[c]: (cpu.cpus, cpu.mems) for c, cpu in applied.items()})

    asyncio.run(asyncio.wait_for(scenario(), 60))


def check_replay(replay: SimulationResult, told: dict[str, tuple[str, str]]) -> None:
    (step,) = replay.steps
    assert step.op == "synchronize" and step.errors == ()
    assert {k: (c.cpus, c.mems) for k, c in step.containers.items()} == told
    assert step.moved == {} and step.updates == {}


def check_whatif(whatif: SimulationResult, applied: dict[str, tuple[str, str]]) -> None:
    (step,) = whatif.steps
    assert step.moved, "reserving CPU 1 as well must move whoever holds it"
    assert set(step.moved) == set(applied)
    for key, (cpus, mems) in applied.items():
        assert step.containers[key].cpus == cpus, key
        assert f"-> {cpus}" in step.moved[key]
        if mems:
            assert step.containers[key].mems == mems, key
