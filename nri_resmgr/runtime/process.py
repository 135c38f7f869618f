"""The daemon process around one `ResmgrPlugin`: options, logging, topology, signals.

`main` builds everything the command line (`DaemonOptions`) and the configuration file
ask for: logging, the machine's topology (`--topology`, else discovery under
`--sysfs-root`), the plugin, the HTTP endpoint (metrics and health, and the read-only
node pages of `node_pages`) and, when the node name is known, the Kubernetes side, which
is imported only then (the pre-registered daemon starts inside the runtime's
registration timeout); then it freezes what it built (`nri_resmgr.ops.collector.settle`)
and serves until stopped.

Signals: SIGTERM and SIGINT stop the daemon (at once, also during registration); SIGHUP
is logged and ignored (no reload on a signal).  A missing socket is retried with backoff
and explained (NRI not enabled? ``nri-resmgr enable-nri``) at the first failure and then
every `HINT_EVERY` attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nri_api.loop import run as run_loop
from nri_api.stub import OnClose
from nri_resmgr.config import Config, load_config
from nri_resmgr.model import ContainerID
from nri_resmgr.ops import collector
from nri_resmgr.ops.logs import (
    configure_logging,
    get_logger,
    log_config_warnings,
    route_stdlib_logging,
)
from nri_resmgr.ops.metrics import Lookup, Page, serve_http
from nri_resmgr.runtime.assembly import DEFAULT_STATE_DIR
from nri_resmgr.runtime.daemon import ResmgrPlugin
from nri_resmgr.topology.model import Topology
from nri_resmgr.view.pages import JSON, NodePages, RateLimit, cached_page, live_view

if TYPE_CHECKING:
    # imported by `main` only when there is a node name (the Kubernetes side is on):
    # the pre-registered daemon starts inside the runtime's registration timeout
    from nri_resmgr.kube.agent import KubeSide

__all__ = ["DaemonOptions", "load_daemon_topology", "main", "node_lookups", "node_pages"]


@dataclass(frozen=True, slots=True)
class DaemonOptions:
    """What the command line decides (anything None: the config or the default)."""

    policy: str | None = None
    config_path: str | None = None
    socket_path: str | None = None
    plugin_index: str | None = None
    plugin_name: str | None = None
    sysfs_root: str | None = None
    topology: str | None = None
    resctrl_root: str | None = None
    cgroup_root: str | None = None
    state_dir: str | None = None
    log_file: str | None = None
    #: Kubernetes side: configuration objects and node reports (off without a node name)
    node_name: str | None = None
    namespace: str = "kube-system"
    kubeconfig: str | None = None
    node_resource_topology: bool = False
    report_interval: float = 30.0
    #: the kubelet's PodResources socket (None: its devices are not asked for)
    pod_resources_socket: str | None = None


def load_daemon_topology(options: DaemonOptions) -> Topology:
    """`--topology` if given (spec, file, archive), else discovery under `--sysfs-root`."""
    if options.topology:
        from nri_resmgr.topology.load import load_topology

        return load_topology(options.topology)
    from nri_resmgr.topology.discover import discover

    # No policy reads network devices, and importing pyroute2 for their netlink names
    # costs about 0.2 s of the runtime's 5 s registration window: the daemon lists them
    # from sysfs. `nri-resmgr topology` still asks netlink.
    return discover(Path(options.sysfs_root or "/"), netlink=False)


async def _serve(plugin: ResmgrPlugin, endpoint: str, kube: KubeSide | None = None) -> int:
    server = None
    if endpoint:
        host, _, port = endpoint.rpartition(":")
        server = await serve_http(
            plugin.metrics,
            plugin.health,
            host=host or "0.0.0.0",
            port=int(port),
            pages=node_pages(plugin),
            lookups=node_lookups(plugin),
        )
    side = asyncio.create_task(kube.run()) if kube is not None else None
    try:
        return await plugin.serve()
    finally:
        plugin.close()
        if side is not None and kube is not None:
            kube.stop()
            side.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await side
        if server is not None:
            server.close()


def node_pages(plugin: ResmgrPlugin) -> dict[str, Page]:
    """The read-only pages the daemon adds to its HTTP port (issue 27): the node picture
    (``/``, ``/view``, ``/view.json``), the node as a scenario (``/scenario.json``) and
    the last decision per container (``/decisions.json``), each made at most once a
    second (`nri_resmgr.view.pages`)."""
    pages = NodePages(lambda: live_view(plugin.topology, plugin.pipeline)).routes()
    pages["/scenario.json"] = cached_page(JSON, lambda: _scenario(plugin))
    pages["/decisions.json"] = cached_page(JSON, lambda: _decisions(plugin))
    return pages


#: explanations of live containers computed per second at most (each asks the policy for
#: a decision and every pool for an offer)
EXPLAIN_PER_SECOND = 10


def node_lookups(plugin: ResmgrPlugin) -> dict[str, Lookup]:
    """The daemon's per-container pages (issue 27): ``/explain/<container id>``, how the
    policy would place that live container now (`view.explain.now_explained`), at most
    `EXPLAIN_PER_SECOND` a second (429 beyond)."""
    limit = RateLimit(EXPLAIN_PER_SECOND)

    def explain(cid: str) -> tuple[str, str, bytes]:
        # the view's explanation imports the topology-aware policy: not before registering
        from nri_resmgr.view.explain import explanation_as_dict, now_explained

        pipeline = plugin.pipeline
        info = pipeline.containers.get(ContainerID(cid))
        if info is None:
            return "404 Not Found", "text/plain", b"no live container of that id\n"
        if not limit.take():
            return "429 Too Many Requests", "text/plain", b"explanations: at most 10 a second\n"
        names = {str(c.id): f"{c.pod.name}/{c.name}" for c in pipeline.containers.values()}
        found = now_explained(pipeline.policy, pipeline.state, info, names=names)
        return "200 OK", JSON, json.dumps(explanation_as_dict(found)).encode()

    return {"/explain/": explain}


def _decisions(plugin: ResmgrPlugin) -> bytes:
    """The last decision of every live container (`nri-resmgr explain --url`), as JSON."""
    return json.dumps(plugin.decisions.as_dict(plugin.pipeline.containers)).encode()


def _scenario(plugin: ResmgrPlugin) -> bytes:
    """The live node as a scenario (`nri-resmgr dump`), as JSON."""
    # the simulator's modules are not imported before the daemon registers
    from nri_resmgr.simulator.dump import dump_scenario

    doc = dump_scenario(
        plugin.topology,
        plugin.config,
        plugin.pipeline.snapshot(),
        description=f"dump of {plugin.full_name}",
    )
    return json.dumps(doc, separators=(",", ":")).encode()


def main(options: DaemonOptions) -> int:
    """Build everything from `options`, then serve until stopped; the process exit code."""
    import signal

    config = load_config(Path(options.config_path)) if options.config_path else Config()
    if options.log_file:
        config = config.model_copy(
            update={"log": config.log.model_copy(update={"file": options.log_file})}
        )
    log_file = configure_logging(config.log)
    route_stdlib_logging(config.log)
    log = get_logger("daemon")
    if options.config_path:
        log_config_warnings(config.warnings, source=options.config_path)
    try:
        topology = load_daemon_topology(options)
        plugin = ResmgrPlugin(
            config=config,
            topology=topology,
            policy_override=options.policy,
            resctrl_root=options.resctrl_root,
            cgroup_root=options.cgroup_root,
            state_dir=options.state_dir or DEFAULT_STATE_DIR,
            # device locality comes from the machine's sysfs, not from a --topology file
            sysfs_root=options.sysfs_root or (None if options.topology else "/"),
            name=options.plugin_name,
            idx=options.plugin_index,
            socket_path=options.socket_path,
            on_close=OnClose.RECONNECT,
            log_file=config.log.file,
        )
        log.info(
            "starting",
            policy=options.policy or config.policy,
            topology=topology.source,
            plugin=plugin.full_name,
            pre_registered=plugin.pre_registered,
        )

        if options.pod_resources_socket:
            # grpc is imported only when asked: the pre-registered daemon starts quickly
            from nri_resmgr.kube.podresources import PodResourcesCache, PodResourcesClient

            plugin.kubelet_devices = PodResourcesCache(
                PodResourcesClient(options.pod_resources_socket), sys_root=plugin.sysfs_root
            )
        kube: KubeSide | None = None
        if options.node_name:
            from nri_resmgr.kube.agent import build_kube_side

            kube = build_kube_side(plugin, options, log=log)

        async def run() -> int:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, plugin.request_stop)
            # SIGHUP would end the process without a word: log it and carry on
            loop.add_signal_handler(
                signal.SIGHUP,
                lambda: log.warning(
                    "SIGHUP ignored: the configuration is not reloaded on a signal; "
                    "restart the daemon to read --config again (a ConfigMap or CRD "
                    "configuration is applied live)"
                ),
            )
            return await _serve(plugin, plugin.config.instrumentation.http_endpoint, kube)

        # everything alive now lives as long as the process (`ops.collector`)
        collector.settle()
        try:
            return run_loop(run())
        finally:
            if plugin.log_handle is not None:
                plugin.log_handle.close()
    finally:
        if log_file is not None:
            log_file.close()
