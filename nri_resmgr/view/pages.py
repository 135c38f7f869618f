"""The daemon's node picture on its HTTP port: ``/`` and ``/view`` (HTML), ``/view.json``.

Theory of operation: `NodePages(build)` holds the function that draws the live node's
`NodeView` (`nri_resmgr.runtime.process` passes one reading the pipeline between
events).  A request is served on the event loop, so the work per request is bounded: the
picture is drawn at most once per `max_age` seconds (O(containers + CPUs), no policy
decision) and its JSON and HTML are made once per picture; any number of requests within
`max_age` are served the same bytes.  The pages are read only: they call no pipeline
method that changes anything.

The view modules (and the policies they know, and the page renderer) are imported at the
first request, not when the daemon starts: the pre-registered daemon must register
within the runtime's timeout (`tests/unit/resmgr/test_startup_imports.py`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from nri_resmgr.model import Assignment, ContainerInfo, PolicyState
    from nri_resmgr.ops.metrics import Page
    from nri_resmgr.policy.base import Policy
    from nri_resmgr.topology.model import Topology
    from nri_resmgr.view.model import NodeView

__all__ = [
    "DEFAULT_MAX_AGE",
    "REFRESH_SECONDS",
    "LiveNode",
    "NodePages",
    "RateLimit",
    "cached_page",
    "live_view",
]

#: how old a served picture may be, in seconds
DEFAULT_MAX_AGE = 1.0
#: how often the HTML page reloads itself
REFRESH_SECONDS = 5

HTML = "text/html; charset=utf-8"
JSON = "application/json"


class LiveNode(Protocol):
    """What the picture reads of the daemon's pipeline (`runtime.pipeline.Pipeline`)."""

    policy: Policy
    state: PolicyState

    def snapshot(self) -> Sequence[tuple[ContainerInfo, Assignment | None]]: ...


def live_view(topology: Topology, node: LiveNode, *, title: str = "live") -> NodeView:
    """The picture of the live node: `node`'s policy, state and containers now."""
    from nri_resmgr.view.model import policy_view

    return policy_view(
        topology,
        policy=node.policy,
        policy_name=node.policy.name,
        state=node.state,
        containers=node.snapshot(),
        title=title,
    )


def cached_page(
    ctype: str,
    build: Callable[[], bytes],
    *,
    max_age: float = DEFAULT_MAX_AGE,
    clock: Callable[[], float] = time.monotonic,
) -> Page:
    """A page whose body `build` makes at most once per `max_age` seconds."""
    made: list[tuple[float, bytes]] = []

    def page() -> tuple[str, bytes]:
        now = clock()
        if not made or now - made[0][0] >= max_age:
            made[:] = [(now, build())]
        return ctype, made[0][1]

    return page


class RateLimit:
    """At most `per_second` takes in any second (a token bucket of that size)."""

    def __init__(self, per_second: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self._clock = clock
        self._tokens = float(per_second)
        self._at = clock()

    def take(self) -> bool:
        """Whether one more may go now (and count it)."""
        now = self._clock()
        self._tokens = min(self.per_second, self._tokens + (now - self._at) * self.per_second)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class NodePages:
    """The node picture's pages (module docstring)."""

    def __init__(
        self,
        build: Callable[[], NodeView],
        *,
        max_age: float = DEFAULT_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._build = build
        self.max_age = max_age
        self._clock = clock
        self._at: float | None = None
        self._view: NodeView | None = None
        self._json: bytes | None = None
        self._html: bytes | None = None
        #: pictures drawn so far (tests and benchmarks read it)
        self.builds = 0

    def view(self) -> NodeView:
        """The current picture, drawn anew when older than `max_age`."""
        now = self._clock()
        if self._view is None or self._at is None or now - self._at >= self.max_age:
            self._view = self._build()
            self._at = now
            self._json = self._html = None
            self.builds += 1
        return self._view

    def json_page(self) -> tuple[str, bytes]:
        view = self.view()
        if self._json is None:
            self._json = json.dumps(view.as_dict(), separators=(",", ":")).encode()
        return JSON, self._json

    def html_page(self) -> tuple[str, bytes]:
        from nri_resmgr.view.html import render_page

        view = self.view()
        if self._html is None:
            page = render_page([view], title=f"nri-resmgr: {view.title}", refresh=REFRESH_SECONDS)
            self._html = page.encode()
        return HTML, self._html

    def routes(self) -> dict[str, Page]:
        """Path -> page, for `nri_resmgr.ops.metrics.serve_http`."""
        return {"/": self.html_page, "/view": self.html_page, "/view.json": self.json_page}
