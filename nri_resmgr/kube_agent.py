"""The daemon's Kubernetes side: configuration objects, their status, node reports.

Theory of operation: `ConfigWatcher` keeps a cache of this daemon's ConfigMaps
(`config_source.configmap_names`) and of the node's group label.  It lists them, then
watches the namespace from the list's resourceVersion, and on every relevant change calls
`on_change()`; when the watch ends or the resourceVersion is too old (410) it lists again.
The blocking loop runs in a thread; the daemon hands `on_change` a function that schedules
the reload on its event loop, where `LiveConfig.offer(watcher.resolve)` validates, applies
or reverts.  `post_event` makes every outcome visible on the ConfigMap that caused it as a
Kubernetes Event (reason ConfigApplied / ConfigRejected).
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from nri_resmgr.config_source import (
    DEFAULT_PREFIX,
    GROUP_LABEL,
    Outcome,
    Resolved,
    configmap_names,
    resolve,
)
from nri_resmgr.kube import KubeClient, KubeError


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
        labels = node.get("metadata", {}).get("labels") or {}
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
                for item in listing.get("items", [])
                if item.get("metadata", {}).get("name") in wanted
            }
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

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
        name = obj.get("metadata", {}).get("name")
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
