"""The node page in a real browser (headless chromium): from a simulator-made file with its
step selector, and from a daemon over a real socket, with hostile pod names."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nri_resmgr.cli import main
from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import QoSClass
from nri_resmgr.ops.metrics import serve_http
from nri_resmgr.runtime.process import node_pages
from nri_resmgr.simulator.run import quiet_log, run_scenario
from nri_resmgr.simulator.scenario import load_scenario
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from nri_resmgr.view.text import shown
from tests.integration.browser import (
    browser,
    choose_step,
    no_alert,
    shown_containers,
    shown_cpus,
)
from tests.support.daemon import daemon_session
from tests.support.messages import ctr, guaranteed, pod
from tests.support.requirements import REPO

SCENARIOS = REPO / "examples" / "scenarios"


@pytest.mark.parametrize("name", ["basic-qos", "static-policy", "balloons-inference"])
def test_simulated_page_shows_each_steps_cpusets(name: str, tmp_path: Path) -> None:
    scenario = SCENARIOS / f"{name}.yaml"
    page = tmp_path / "node.html"
    assert main(["simulate", "--scenario", str(scenario), "--html", str(page)]) == 0
    result = run_scenario(load_scenario(scenario), log=quiet_log())
    with browser() as session:
        session.get(page.as_uri())
        assert no_alert(session)
        for step in result.steps:
            choose_step(session, step.step)
            rows = shown_containers(session)
            seen = {f"{r['pod']}/{r['name']}": r["cpus"] for r in rows.values()}
            assert seen == {k: c.cpus for k, c in step.containers.items()}, step.step
            cpus = shown_cpus(session)
            for cid, r in rows.items():
                if r["kind"] in ("exclusive", "isolated"):
                    held = IDSet(c for c, (_, owner) in cpus.items() if owner == cid)
                    assert held == IDSet.parse(r["cpus"]), (step.step, r["pod"])


#: pod names and annotations no API server would let through, but a runtime may send
HOSTILE = (
    "<script>alert('pod')</script>",
    '"><img src=x onerror=alert(1)>',
    "bell\x07esc\x1b[2Jrtl\u202eend",
)


def test_daemon_page_shows_the_runtimes_cpusets_and_hostile_names_escaped(
    topology: Topology,
) -> None:
    async def scenario() -> None:
        config = config_from_mapping(
            {"policy": "topology-aware", "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}}}
        )
        async with daemon_session(topology, config) as (rt, plugin, _):
            server = await serve_http(
                plugin.metrics, plugin.health, host="127.0.0.1", port=0, pages=node_pages(plugin)
            )
            port = server.sockets[0].getsockname()[1]
            #: what the runtime was told: container id -> cpuset (adjustments and updates)
            told: dict[str, str] = {}
            names: dict[str, str] = {}
            try:
                for i, name in enumerate(HOSTILE):
                    sandbox = pod(f"p{i}", QoSClass.GUARANTEED)
                    sandbox.name = name
                    sandbox.annotations[f"note.resource-policy.nri.io/pod{i}"] = name
                    await rt.run_pod_sandbox(sandbox)
                    c = guaranteed(sandbox, "c", "1") if i < 2 else ctr(sandbox, "c", cpu="200m")
                    c.id = f"ctr-{i}"
                    reply = await rt.create_container(sandbox, c)
                    told[c.id] = reply.adjust.linux.resources.cpu.cpus
                    for u in reply.update:
                        told[u.container_id] = u.linux.resources.cpu.cpus
                    names[c.id] = name
                url = f"http://127.0.0.1:{port}/"
                rows, cpus, alert_free, images = await asyncio.to_thread(_read, url)
            finally:
                server.close()
                await server.wait_closed()
            assert alert_free and images == 0
            assert {cid: r["cpus"] for cid, r in rows.items()} == told
            for cid, name in names.items():
                assert rows[cid]["pod"] == shown(name)
                index = cid.removeprefix("ctr-")
                assert rows[cid]["annotations"] == (
                    f"note.resource-policy.nri.io/pod{index}={shown(name)}"
                )
                if rows[cid]["kind"] == "exclusive":
                    held = IDSet(c for c, (_, owner) in cpus.items() if owner == cid)
                    assert held == IDSet.parse(told[cid])
            assert cpus[0] == ("reserved", "")

    asyncio.run(asyncio.wait_for(scenario(), 120))


def _read(url: str) -> tuple[dict[str, dict[str, str]], dict[int, tuple[str, str]], bool, int]:
    from selenium.webdriver.common.by import By

    with browser() as session:
        session.get(url)
        return (
            shown_containers(session),
            shown_cpus(session),
            no_alert(session),
            len(session.find_elements(By.TAG_NAME, "img")),
        )


#: the daemon's configuration per policy, for the live page of each
LIVE = {
    "static": {"policy": "static", "policyConfig": {"reservedSystemCPUs": "0"}},
    "balloons": {
        "policy": "balloons",
        "policyConfig": {
            "reservedResources": {"cpu": "cpuset:0"},
            "balloonTypes": [{"name": "dbs", "namespaces": ["default"], "minCPUs": 0}],
        },
    },
}


@pytest.mark.parametrize("policy", list(LIVE))
def test_daemon_page_of_static_and_balloons_shows_the_runtimes_cpusets(
    policy: str, topology: Topology
) -> None:
    async def scenario() -> None:
        async with daemon_session(topology, LIVE[policy]) as (rt, plugin, _):
            server = await serve_http(
                plugin.metrics, plugin.health, host="127.0.0.1", port=0, pages=node_pages(plugin)
            )
            port = server.sockets[0].getsockname()[1]
            told: dict[str, str] = {}
            try:
                for name, cpu in (("db", "2"), ("cache", "1")):
                    sandbox = pod(name, QoSClass.GUARANTEED)
                    await rt.run_pod_sandbox(sandbox)
                    reply = await rt.create_container(sandbox, guaranteed(sandbox, "c", cpu))
                    told[f"{name}-c"] = reply.adjust.linux.resources.cpu.cpus
                    for u in reply.update:
                        told[u.container_id] = u.linux.resources.cpu.cpus
                rows, cpus, _, _ = await asyncio.to_thread(_read, f"http://127.0.0.1:{port}/")
            finally:
                server.close()
                await server.wait_closed()
            assert {cid: r["cpus"] for cid, r in rows.items()} == told
            if policy == "static":
                assert cpus[0] == ("reserved", "")
                for cid, cpuset in told.items():
                    held = IDSet(c for c, (_, owner) in cpus.items() if owner == cid)
                    assert held == IDSet.parse(cpuset), (cid, cpus)
            else:
                # each container runs on its balloon's CPUs, which the page marks as such
                for cid, cpuset in told.items():
                    balloon = rows[cid]["pool"]
                    assert balloon.startswith("dbs[")
                    held = IDSet(c for c, hold in cpus.items() if hold == ("balloon", balloon))
                    assert held == IDSet.parse(cpuset), (cid, cpus)

    asyncio.run(asyncio.wait_for(scenario(), 120))
