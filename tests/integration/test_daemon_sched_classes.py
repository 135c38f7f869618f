"""The daemon refuses scheduling classes a runtime's NRI release cannot carry.

Configure from the runtime, a live reload, and a runtime new enough: over a real socket
with the in-project fake runtime (`nri_api.testing`).  The Go runtime library at each
version is in tests/conformance/test_daemon_sched_classes.py.
"""

from __future__ import annotations

import json

import pytest

from nri_api.errors import RPCError
from nri_api.testing import FakeRuntime, PluginRejected
from nri_resmgr.config import config_from_mapping
from nri_resmgr.model import ConfigError, QoSClass
from nri_resmgr.topology.model import Topology
from tests.support.daemon import daemon_session, run
from tests.support.messages import guaranteed, pod

TA_CLASSES = {
    "policy": "topology-aware",
    "policyConfig": {
        "reservedResources": {"cpu": "cpuset:0"},
        "schedulingClasses": [{"name": "rt", "policy": "rr", "priority": 5}],
    },
}


def test_live_reload_with_classes_on_an_old_runtime_is_refused(topology: Topology) -> None:
    async def scenario() -> None:
        async with daemon_session(topology, rt_kw={"nri_version": "v0.8.0"}) as (_rt, plugin, _):
            before = plugin.pipeline
            with pytest.raises(ConfigError, match=r"LinuxScheduler \(NRI v0.11.0\+; "):
                plugin.apply_config(config_from_mapping(TA_CLASSES))
            assert plugin.pipeline is before  # nothing changed

    run(scenario)


def test_configure_with_classes_on_an_old_runtime_is_refused(topology: Topology) -> None:
    async def scenario() -> None:
        runtime = FakeRuntime(nri_version="v0.6.1", config=json.dumps(TA_CLASSES))
        with pytest.raises((RPCError, PluginRejected), match=r"scheduling classes rt.*NRI v0.6.1"):
            async with daemon_session(topology, runtime=runtime):
                pass

    run(scenario)


def test_a_new_runtime_gets_the_class_in_the_adjustment(topology: Topology) -> None:
    async def scenario() -> None:
        runtime = FakeRuntime(nri_version="v0.12.2", config=json.dumps(TA_CLASSES))
        async with daemon_session(topology, runtime=runtime) as (rt, _plugin, _):
            db = pod("db", QoSClass.GUARANTEED)
            db.annotations["scheduling-class.resource-policy.nri.io"] = "rt"
            reply = await rt.create_container(db, guaranteed(db, "pg", "2"))
            assert reply.adjust.linux.scheduler.priority == 5

    run(scenario)
