"""Posting the pods' events: the shell around `nri_resmgr.view.events.EventQueue`.

Theory of operation: the daemon offers a note to its `EventQueue` after each decision
(on the event loop, O(1)); `PodEventPoster.run`, a task of the daemon's Kubernetes side,
wakes every `tick` seconds (sooner when the oldest pending event is due), takes what the
queue's coalescing and rate allow and POSTs each as a core/v1 Event in the pod's
namespace, one at a time in a worker thread (`asyncio.to_thread`), so the event loop never
waits for the API server.  An event the API server refuses is logged and dropped: the
pod's next decision is a new event.  Before each round the queue takes the daemon's
current ``events`` configuration (a live reconfiguration can turn events off or change
the rate).

`event_object` is the Event as the API takes it: the pod as involvedObject (kind Pod,
namespace, name, uid), the reason and type, the message, the count of coalesced notes,
and the source component ``nri-resmgr`` on this node.  The chart's service account may
create events and nothing else about them (charts/nri-resmgr/templates/rbac.yaml).
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

from nri_resmgr.kube.client import KubeClient, KubeError
from nri_resmgr.view.events import EventQueue, EventsConfig, PodEvent

__all__ = ["COMPONENT", "PodEventPoster", "event_object"]

#: the Event's source component
COMPONENT = "nri-resmgr"


def _stamp(at: datetime.datetime) -> str:
    return at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_object(
    event: PodEvent, *, node: str, first: datetime.datetime, last: datetime.datetime
) -> dict[str, Any]:
    """The core/v1 Event of `event` posted from `node` (first and last note at the times
    given, as wall-clock times)."""
    pod = event.pod
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            # an Event's name must be a DNS subdomain: the pod's uid is one, the pod's
            # name (which Kubernetes checked) too; the suffix makes it unique
            "name": f"{pod.name}.{uuid.uuid4().hex[:16]}",
            "namespace": pod.namespace,
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid,
        },
        "reason": str(event.reason),
        "message": event.message,
        "type": str(event.type),
        "count": event.count,
        "firstTimestamp": _stamp(first),
        "lastTimestamp": _stamp(last),
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT,
        "reportingInstance": node,
    }


class PodEventPoster:
    """Posts what `queue` lets out (module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        queue: EventQueue,
        *,
        node: str,
        config: Callable[[], EventsConfig],
        log: Any,
        tick: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.queue = queue
        self.node = node
        self.config = config
        self.log = log
        self.tick = tick
        self.clock = clock
        #: events posted and refused by the API server so far
        self.posted = 0
        self.failed = 0

    def _wall(self, at: float, now: float) -> datetime.datetime:
        """The wall-clock time of the monotonic reading `at` (`now` is the reading now)."""
        return datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=now - at)

    def post(self, event: PodEvent, now: float) -> None:
        """POST one event (blocking: call it in a thread)."""
        body = event_object(
            event,
            node=self.node,
            first=self._wall(event.first, now),
            last=self._wall(event.last, now),
        )
        path = f"/api/v1/namespaces/{event.pod.namespace}/events"
        self.client.request("POST", path, body=body)

    async def round(self) -> int:
        """One round: take the due events and post them; returns how many were posted."""
        config = self.config()
        if config != self.queue.config:
            self.queue.configure(config)
        now = self.clock()
        sent = 0
        for event in self.queue.take(now):
            try:
                await asyncio.to_thread(self.post, event, now)
            except KubeError as exc:
                self.failed += 1
                self.log.warning(
                    "pod event not posted",
                    pod=f"{event.pod.namespace}/{event.pod.name}",
                    reason=str(event.reason),
                    error=str(exc),
                )
            else:
                self.posted += 1
                sent += 1
        return sent

    async def run(self, stop: Callable[[], bool]) -> None:
        """Rounds until `stop()` is true."""
        while not stop():
            await self.round()
            due = self.queue.next_due()
            # due already but held back by the rate: the next token is 1/rate away
            soonest = max(0.05, 1.0 / self.queue.config.rate)
            wait = self.tick if due is None else min(self.tick, max(due - self.clock(), soonest))
            await asyncio.sleep(wait)
