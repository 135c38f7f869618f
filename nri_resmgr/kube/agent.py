"""The daemon's Kubernetes side: configuration objects, their status, node reports.

Theory of operation: `ConfigWatcher` keeps a cache of this daemon's ConfigMaps
(`config_source.configmap_names`) and of the node's group label.  It lists them, then
watches the namespace from the list's resourceVersion, and on every relevant change calls
`on_change()`; when the watch ends or the resourceVersion is too old (410) it lists again.
The blocking loop runs in a thread; the daemon hands `on_change` a function that schedules
the reload on its event loop, where `LiveConfig.offer(watcher.resolve)` validates, applies
or reverts.  `post_event` makes every outcome visible on the ConfigMap that caused it as a
Kubernetes Event (reason ConfigApplied / ConfigRejected).

`KubeSide` runs next to the NRI plugin in the daemon's event loop: the watch thread kicks
a reload task, which applies the new configuration under the plugin's lock (so never in
the middle of an event) and then sends the moved containers' updates with the stub's
safe `update_containers`; a second task writes the node report every interval (one API
request at most, skipped when unchanged).  `build_kube_side` turns the daemon options
into one, or None when there is no node name or no credentials.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nri_api.errors import ConnectionClosed
from nri_resmgr.config import Config
from nri_resmgr.kube.client import KubeClient, KubeError, in_cluster_credentials, load_kubeconfig
from nri_resmgr.kube.config_source import (
    DEFAULT_PREFIX,
    GROUP_LABEL,
    LiveConfig,
    Outcome,
    Resolved,
    Source,
    configmap_names,
    resolve,
)
from nri_resmgr.kube.report import PoolReporter, ReportManager, TopologyReporter
from nri_resmgr.model import ConfigError


class ConfigWatcher:
    def __init__(
        self,
        client: KubeClient,
        *,
        node: str,
        namespace: str,
        prefix: str = DEFAULT_PREFIX,
        group_label: str = GROUP_LABEL,
        file_text: tuple[str, str] | None = None,
        configure_text: str = "",
    ) -> None:
        self.client = client
        self.node = node
        self.namespace = namespace
        self.prefix = prefix
        self.group_label = group_label
        self.file_text = file_text
        self.configure_text = configure_text
        self.group: str | None = None
        self.configmaps: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # -- reading ------------------------------------------------------------------------

    def _names(self) -> list[str]:
        return configmap_names(self.node, self.group, self.prefix)

    def read_group(self) -> str | None:
        node = self.client.request("GET", f"/api/v1/nodes/{self.node}")
        labels = (node.get("metadata") or {}).get("labels") or {}
        group = labels.get(self.group_label)
        return str(group) if group else None

    def relist(self) -> str:
        """Refresh the cache; returns the list's resourceVersion."""
        try:
            group = self.read_group()
        except KubeError as exc:
            if exc.status != 404:
                raise
            group = None
        listing = self.client.request("GET", f"/api/v1/namespaces/{self.namespace}/configmaps")
        with self._lock:
            self.group = group
            wanted = set(self._names())
            self.configmaps = {
                item["metadata"]["name"]: item
                for item in listing.get("items") or []
                if (item.get("metadata") or {}).get("name") in wanted
            }
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

    def resolve(self) -> Resolved:
        with self._lock:
            configmaps = dict(self.configmaps)
            group = self.group
        return resolve(
            configmaps=configmaps,
            node=self.node,
            group=group,
            namespace=self.namespace,
            file_text=self.file_text,
            configure_text=self.configure_text,
            prefix=self.prefix,
        )

    def _apply_event(self, event: dict[str, Any]) -> bool:
        obj = event.get("object") or {}
        name = (obj.get("metadata") or {}).get("name")
        kind = event.get("type")
        with self._lock:
            if name not in self._names():
                return False
            if kind == "DELETED":
                self.configmaps.pop(name, None)
            elif kind in ("ADDED", "MODIFIED"):
                self.configmaps[name] = obj
            else:
                return False
        return True

    def run_blocking(
        self,
        on_change: Callable[[], None],
        stop: threading.Event,
        *,
        watch_seconds: int = 60,
        retry_seconds: float = 2.0,
    ) -> None:
        """List, then watch, calling `on_change` after every relevant change, until `stop`."""
        while not stop.is_set():
            try:
                rv = self.relist()
                on_change()
                path = f"/api/v1/namespaces/{self.namespace}/configmaps"
                for event in self.client.watch(path, resource_version=rv,
                                               timeout_seconds=watch_seconds):
                    if stop.is_set():
                        return
                    if event.get("type") == "ERROR":
                        break  # e.g. 410 Gone: list again
                    if self._apply_event(event):
                        on_change()
            except KubeError:
                stop.wait(retry_seconds)

    # -- status -------------------------------------------------------------------------

    def post_event(self, outcome: Outcome) -> None:
        """A Kubernetes Event on the ConfigMap the outcome is about (if it is one)."""
        source = outcome.source
        if source.kind != "configmap" or not source.object_name:
            return
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{source.object_name}.{uuid.uuid4().hex[:10]}",
                "namespace": self.namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": source.object_name,
                "namespace": self.namespace,
                "resourceVersion": source.resource_version,
            },
            "reason": "ConfigApplied" if outcome.applied else "ConfigRejected",
            "message": f"node {self.node}: {outcome.message}"[:1000],
            "type": "Normal" if outcome.applied else "Warning",
            "source": {"component": "nri-resmgr", "host": self.node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.client.request("POST", f"/api/v1/namespaces/{self.namespace}/events", body=event)


def wait_until(predicate: Callable[[], bool], *, timeout: float, step: float = 0.1) -> bool:
    """Poll `predicate` until true or `timeout` seconds pass (for tests and start-up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


# -- the daemon's Kubernetes side ---------------------------------------------------------


class KubeSide:
    """Runs the config watch (live reload) and the node report next to the NRI plugin.

    `plugin` is the daemon's `ResmgrPlugin` (typed loosely to keep this module below the
    daemon): it offers `lock`, `apply_config(config) -> updates`, `update_containers`,
    `metrics` and `state_snapshot()`.
    """

    def __init__(
        self,
        plugin: Any,
        *,
        watcher: ConfigWatcher | None,
        live: LiveConfig | None,
        manager: ReportManager | None,
        interval: float,
        log: Any,
    ) -> None:
        self.plugin = plugin
        self.watcher = watcher
        self.live = live
        self.manager = manager
        self.interval = interval
        self.log = log
        self._stop = threading.Event()
        self._pending: list[Any] = []
        self._outcomes: list[Outcome] = []

    def stop(self) -> None:
        self._stop.set()

    # LiveConfig callbacks (called under the plugin's lock, on the event loop)
    def apply(self, config: Config) -> None:
        self._pending.extend(self.plugin.apply_config(config))

    def report(self, outcome: Outcome) -> None:
        self._outcomes.append(outcome)
        result = "ok" if outcome.applied else "error"
        self.plugin.metrics.config_reloads.labels(outcome=result).inc()
        if outcome.applied:
            self.log.info("configuration reloaded", source=outcome.source.name,
                          message=outcome.message)
        else:
            self.log.warning("configuration not applied", source=outcome.source.name,
                             message=outcome.message)

    async def reload(self) -> None:
        if self.watcher is None or self.live is None:
            return
        self._pending.clear()
        async with self.plugin.lock:
            self.live.offer(self.watcher.resolve)
        updates, self._pending = list(self._pending), []
        if updates:
            try:
                await self.plugin.update_containers(updates)
            except ConnectionClosed:
                self.log.info("not connected: the next Synchronize applies the new placement")
        outcomes, self._outcomes = self._outcomes, []
        for outcome in outcomes:
            try:
                await asyncio.to_thread(self.watcher.post_event, outcome)
            except KubeError as exc:
                self.log.warning("cannot post the configuration event", error=str(exc))

    async def _watch(self) -> None:
        assert self.watcher is not None
        loop = asyncio.get_running_loop()
        kick = asyncio.Event()
        thread = threading.Thread(
            target=self.watcher.run_blocking,
            args=(lambda: loop.call_soon_threadsafe(kick.set), self._stop),
            name="nri-resmgr-config-watch",
            daemon=True,
        )
        thread.start()
        while not self._stop.is_set():
            await kick.wait()
            kick.clear()
            await self.reload()

    async def _report(self) -> None:
        assert self.manager is not None
        while not self._stop.is_set():
            try:
                await asyncio.to_thread(self.manager.cycle)
            except KubeError as exc:
                self.log.warning("node report not written", error=str(exc))
            await asyncio.sleep(self.interval)

    async def run(self) -> None:
        tasks = []
        if self.watcher is not None:
            tasks.append(asyncio.create_task(self._watch()))
        if self.manager is not None:
            tasks.append(asyncio.create_task(self._report()))
        try:
            await asyncio.gather(*tasks)
        finally:
            self._stop.set()
            for t in tasks:
                t.cancel()


def build_kube_side(plugin: Any, options: Any, *, log: Any) -> KubeSide | None:
    """The Kubernetes side for `options` (`runtime.process.DaemonOptions`), or None when it is off.

    Needs a node name (`--node-name`, or $NODE_NAME through the command) and credentials
    (`--kubeconfig`, or the in-cluster service account).  The first configuration is read
    here, before the plugin connects, so the node starts with the document in force.
    """
    if not options.node_name:
        return None
    creds = (load_kubeconfig(options.kubeconfig) if options.kubeconfig
             else in_cluster_credentials())
    if creds is None:
        log.warning("no Kubernetes credentials (in-cluster or --kubeconfig): "
                    "configuration objects and node reports are off")
        return None
    client = KubeClient(creds)
    file_text = None
    if options.config_path:
        path = Path(options.config_path)
        file_text = (str(path), path.read_text(encoding="utf-8"))
    watcher = ConfigWatcher(client, node=options.node_name, namespace=options.namespace,
                            file_text=file_text)
    initial = None
    try:
        watcher.relist()
        initial = watcher.resolve()
    except (KubeError, ConfigError) as exc:
        log.warning("configuration objects not usable at start; keeping the local config",
                    error=str(exc))
    if initial is None:
        initial = Resolved(plugin.config, Source(name="local configuration", text="",
                                                 kind="file"))
    elif initial.source.kind == "configmap":
        plugin.apply_config(initial.config)
        log.info("configuration from the cluster", source=initial.source.name)
    side = KubeSide(plugin, watcher=watcher, live=None, manager=None,
                    interval=options.report_interval, log=log)
    side.live = LiveConfig(initial, apply=side.apply, report=side.report)
    if options.node_resource_topology:
        manager = ReportManager(options.node_name, client,
                                min_interval=options.report_interval, clock=time.monotonic)
        manager.register(TopologyReporter(plugin.topology))
        manager.register(PoolReporter(plugin.state_snapshot, plugin.config.policy))
        side.manager = manager
    return side
