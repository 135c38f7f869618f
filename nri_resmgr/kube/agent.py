"""The daemon's Kubernetes side: configuration objects, their status, node reports.

Theory of operation: `ConfigWatcher` keeps a cache of this daemon's ConfigMaps
(`config_source.configmap_names`), of nri-plugins' configuration custom resources
(`config_source.resource_names`, every kind of `policy_documents.policy_kinds`) and of
the node's group labels.  Each collection is listed, then watched from the list's
resourceVersion (one thread per collection), and every relevant change calls
`on_change()` (one call at a time); when a watch ends or its resourceVersion is too old
(410) that collection is listed again.  A kind whose CRD is not installed is retried
every `missing_seconds`.  `record_status` writes the per-node status of the custom
resources: Success or Failure (with the error) on the one offered, at its generation, and
removes this node's entry from the ones no longer in use.
The blocking loop runs in a thread; the daemon hands `on_change` a function that schedules
the reload on its event loop, where `LiveConfig.offer(watcher.resolve)` validates, applies
or reverts.  `post_event` makes every outcome visible on the ConfigMap that caused it as a
Kubernetes Event (reason ConfigApplied / ConfigRejected).

`KubeSide` runs next to the NRI plugin in the daemon's event loop: the watch thread kicks
a reload task, which applies the new configuration under the plugin's lock (so never in
the middle of an event) and then sends the moved containers' updates with the stub's
safe `update_containers`; a second task writes the node report soon after every
decision (`report_loop.ReportLoop`: coalesced, rate limited, built off the event loop); a
third posts the pods' events (`pod_events.PodEventPoster`, from the plugin's `pod_events`
queue).  `build_kube_side` turns the daemon options into one, or None when there is no
node name or no credentials.
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
    RESOURCE_GROUP_LABEL,
    LiveConfig,
    Outcome,
    Resolved,
    Source,
    configmap_names,
    node_status,
    resolve,
    resource_names,
    resource_path,
)
from nri_resmgr.kube.pod_events import PodEventPoster
from nri_resmgr.kube.report import PoolReporter, ReportManager, TopologyReporter
from nri_resmgr.kube.report_loop import (
    DEFAULT_POLL,
    ReportLoop,
    capture_plugin_use,
    plugin_seen,
)
from nri_resmgr.model import ConfigError, ResmgrError
from nri_resmgr.ops.logs import log_config_warnings
from nri_resmgr.policy_documents import policy_kinds

#: seconds between two writes of the node report at least (a decision is written within
#: this plus `report_loop.DEFAULT_POLL`, under a second; decisions meanwhile make one write)
REPORT_MIN_INTERVAL = 0.75

#: the merge patch content type (nri-plugins patches node status this way)
MERGE_PATCH = "application/merge-patch+json"


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
        self.resource_group: str | None = None
        self.configmaps: dict[str, dict[str, Any]] = {}
        self.resources: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._notify = threading.Lock()
        #: API path of a custom resource -> (generation, error) of the status written there
        self._status: dict[str, tuple[int, str]] = {}

    # -- reading ------------------------------------------------------------------------

    def _names(self) -> list[str]:
        return configmap_names(self.node, self.group, self.prefix)

    def read_groups(self) -> tuple[str | None, str | None]:
        """The node's ConfigMap group and custom resource group labels."""
        node = self.client.request("GET", f"/api/v1/nodes/{self.node}")
        labels = (node.get("metadata") or {}).get("labels") or {}
        group, resource_group = labels.get(self.group_label), labels.get(RESOURCE_GROUP_LABEL)
        return (str(group) if group else None, str(resource_group) if resource_group else None)

    def read_group(self) -> str | None:
        return self.read_groups()[0]

    def relist(self) -> str:
        """Refresh the ConfigMap cache and the labels; returns the list's resourceVersion."""
        try:
            group, resource_group = self.read_groups()
        except KubeError as exc:
            if exc.status != 404:
                raise
            group = resource_group = None
        listing = self.client.request("GET", f"/api/v1/namespaces/{self.namespace}/configmaps")
        with self._lock:
            self.group = group
            self.resource_group = resource_group
            wanted = set(self._names())
            self.configmaps = {
                item["metadata"]["name"]: item
                for item in listing.get("items") or []
                if (item.get("metadata") or {}).get("name") in wanted
            }
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

    def relist_resources(self, plural: str) -> str:
        """Refresh the cache of one custom resource kind; returns the resourceVersion."""
        listing = self.client.request("GET", resource_path(self.namespace, plural))
        with self._lock:
            for key in [k for k in self.resources if k[0] == plural]:
                del self.resources[key]
            for item in listing.get("items") or []:
                name = str((item.get("metadata") or {}).get("name") or "")
                self.resources[(plural, name)] = item
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

    def resolve(self) -> Resolved:
        with self._lock:
            configmaps = dict(self.configmaps)
            wanted = set(resource_names(self.node, self.resource_group))
            resources = {k: v for k, v in self.resources.items() if k[1] in wanted}
            group = self.group
            resource_group = self.resource_group
        return resolve(
            configmaps=configmaps,
            node=self.node,
            group=group,
            namespace=self.namespace,
            file_text=self.file_text,
            configure_text=self.configure_text,
            prefix=self.prefix,
            resources=resources,
            resource_group=resource_group,
        )

    def _apply_resource_event(self, plural: str, event: dict[str, Any]) -> bool:
        obj = event.get("object") or {}
        name = str((obj.get("metadata") or {}).get("name") or "")
        kind = event.get("type")
        with self._lock:
            if kind == "DELETED":
                self.resources.pop((plural, name), None)
            elif kind in ("ADDED", "MODIFIED"):
                old = self.resources.get((plural, name))
                self.resources[(plural, name)] = obj
                if old is not None and old.get("spec") == obj.get("spec"):
                    return False  # e.g. our own status write
            else:
                return False
            return name in resource_names(self.node, self.resource_group)

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

    def _stream(
        self,
        path: str,
        relist: Callable[[], str],
        apply_event: Callable[[dict[str, Any]], bool],
        on_change: Callable[[], None],
        stop: threading.Event,
        *,
        watch_seconds: int,
        retry_seconds: float,
        missing_seconds: float,
    ) -> None:
        """List, then watch one collection, calling `on_change` after each relevant change."""
        while not stop.is_set():
            try:
                rv = relist()
                with self._notify:
                    on_change()
                for event in self.client.watch(
                    path, resource_version=rv, timeout_seconds=watch_seconds
                ):
                    if stop.is_set():
                        return
                    if event.get("type") == "ERROR":
                        break  # e.g. 410 Gone: list again
                    if apply_event(event):
                        with self._notify:
                            on_change()
            except KubeError as exc:
                stop.wait(missing_seconds if exc.status == 404 else retry_seconds)

    def run_blocking(
        self,
        on_change: Callable[[], None],
        stop: threading.Event,
        *,
        watch_seconds: int = 60,
        retry_seconds: float = 2.0,
        missing_seconds: float = 30.0,
    ) -> None:
        """Watch the ConfigMaps and every custom resource kind until `stop`.

        `on_change` is called after every relevant change, never twice at once.
        """
        timing: dict[str, Any] = {
            "watch_seconds": watch_seconds,
            "retry_seconds": retry_seconds,
            "missing_seconds": missing_seconds,
        }
        threads = []
        for kind in policy_kinds():
            plural = kind.plural
            thread = threading.Thread(
                target=self._stream,
                args=(
                    resource_path(self.namespace, plural),
                    lambda plural=plural: self.relist_resources(plural),
                    lambda event, plural=plural: self._apply_resource_event(plural, event),
                    on_change,
                    stop,
                ),
                kwargs=timing,
                name=f"nri-resmgr-watch-{plural}",
                daemon=True,
            )
            thread.start()
            threads.append(thread)
        try:
            self._stream(
                f"/api/v1/namespaces/{self.namespace}/configmaps",
                self.relist,
                self._apply_event,
                on_change,
                stop,
                **timing,
            )
        finally:
            for thread in threads:
                thread.join(timeout=1)

    # -- custom resource status ---------------------------------------------------------

    def _patch_status(self, path: str, patch: dict[str, Any]) -> None:
        self.client.request("PATCH", f"{path}/status", body=patch, content_type=MERGE_PATCH)

    def record_status(self, outcome: Outcome) -> None:
        """Write this node's status on the custom resources `outcome` is about.

        The resource offered gets Success (taken into use, or unchanged) or Failure with
        the error, at its generation; written once per (generation, error).  A resource
        that is neither offered nor in force loses this node's entry.
        """
        offered = outcome.offered
        keep = {s.path for s in (offered, outcome.source) if s is not None and s.path}
        if offered is not None and offered.kind == "resource":
            state = (offered.generation, outcome.error)
            if self._status.get(offered.path) != state:
                self._patch_status(
                    offered.path,
                    node_status(self.node, generation=offered.generation, error=outcome.error),
                )
                self._status[offered.path] = state
        for path in [p for p in self._status if p not in keep]:
            del self._status[path]
            try:
                self._patch_status(path, node_status(self.node, generation=None))
            except KubeError as exc:
                if exc.status != 404:  # a deleted resource has no status to clear
                    raise

    # -- status -------------------------------------------------------------------------

    def post_event(self, outcome: Outcome) -> None:
        """A Kubernetes Event on the ConfigMap the outcome is about (if it is one)."""
        source = outcome.offered or outcome.source
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
    `metrics`, `state_snapshot()`, `config` and `pod_events`.
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
        poll: float = DEFAULT_POLL,
    ) -> None:
        self.plugin = plugin
        self.watcher = watcher
        self.live = live
        self.manager = manager
        self.interval = interval
        self.log = log
        #: posts the pods' events (`pod_events`), None: not posted
        self.poster: PodEventPoster | None = None
        self.report_loop = ReportLoop(
            capture=lambda: capture_plugin_use(plugin),
            seen=lambda: plugin_seen(plugin),
            interval=interval,
            poll=poll,
            log=log,
        )
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
        self.plugin.metrics.count_config_reload(result)
        if outcome.applied:
            self.log.info(
                "configuration reloaded", source=outcome.source.name, message=outcome.message
            )
        else:
            self.log.warning(
                "configuration not applied", source=outcome.source.name, message=outcome.message
            )

    async def reload(self) -> None:
        if self.watcher is None or self.live is None:
            return
        self._pending.clear()
        async with self.plugin.lock:
            outcome = self.live.offer(self.watcher.resolve)
        try:
            await asyncio.to_thread(self.watcher.record_status, outcome)
        except KubeError as exc:
            self.log.warning("cannot write the configuration status", error=str(exc))
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
        await self.report_loop.run(self.manager, self._stop)

    async def run(self) -> None:
        tasks = []
        if self.watcher is not None:
            tasks.append(asyncio.create_task(self._watch()))
        if self.manager is not None:
            tasks.append(asyncio.create_task(self._report()))
        if self.poster is not None:
            tasks.append(asyncio.create_task(self.poster.run(self._stop.is_set)))
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
    creds = load_kubeconfig(options.kubeconfig) if options.kubeconfig else in_cluster_credentials()
    if creds is None:
        log.warning(
            "no Kubernetes credentials (in-cluster or --kubeconfig): "
            "configuration objects and node reports are off"
        )
        return None
    client = KubeClient(creds)
    file_text = None
    if options.config_path:
        path = Path(options.config_path)
        file_text = (str(path), path.read_text(encoding="utf-8"))
    watcher = ConfigWatcher(
        client, node=options.node_name, namespace=options.namespace, file_text=file_text
    )
    initial = None
    try:
        watcher.relist()
        for kind in policy_kinds():
            try:
                watcher.relist_resources(kind.plural)
            except KubeError as exc:
                if exc.status != 404:  # 404: the CRD is not installed
                    raise
        initial = watcher.resolve()
    except (KubeError, ConfigError) as exc:
        log.warning(
            "configuration objects not usable at start; keeping the local config", error=str(exc)
        )
    if initial is not None and initial.source.kind in ("configmap", "resource"):
        try:
            plugin.apply_config(initial.config)
        except ResmgrError as exc:  # e.g. a value this machine cannot take
            # the first reload offers it again: it fails there, which is reported (status)
            log.warning(
                "the cluster's configuration does not apply here; keeping the local config",
                source=initial.source.name,
                error=str(exc),
            )
            initial = None
        else:
            log_config_warnings(initial.config.warnings, source=initial.source.name)
            log.info("configuration from the cluster", source=initial.source.name)
    if initial is None:
        initial = Resolved(plugin.config, Source(name="local configuration", text="", kind="file"))
    side = KubeSide(
        plugin, watcher=watcher, live=None, manager=None, interval=options.report_interval, log=log
    )
    side.live = LiveConfig(initial, apply=side.apply, report=side.report)
    side.poster = PodEventPoster(
        client,
        plugin.pod_events,
        node=options.node_name,
        config=lambda: plugin.config.events,
        log=log,
    )
    if options.node_resource_topology:
        manager = ReportManager(
            options.node_name,
            client,
            min_interval=min(REPORT_MIN_INTERVAL, options.report_interval),
            clock=time.monotonic,
        )
        manager.register(TopologyReporter(plugin.topology, use=side.report_loop.current_use))
        manager.register(PoolReporter(plugin.state_snapshot, plugin.config.policy, balloons=False))
        side.manager = manager
    return side
