"""The daemon's node pages (`view.pages`): bounded work per request, read only."""

from __future__ import annotations

import json

from nri_resmgr.topology.load import load_topology
from nri_resmgr.view.model import NodeView, build_view, view_from_dict
from nri_resmgr.view.pages import REFRESH_SECONDS, NodePages, RateLimit
from nri_resmgr.view.pools import PoolCPUs

TOPO = load_topology("packages=1,cores=2,threads=2")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_picture_is_drawn_at_most_once_per_max_age() -> None:
    drawn: list[int] = []

    def build() -> NodeView:
        drawn.append(1)
        return build_view(
            TOPO, policy="p", containers=(), pools=PoolCPUs(), title=f"picture {len(drawn)}"
        )

    clock = Clock()
    pages = NodePages(build, max_age=1.0, clock=clock)
    routes = pages.routes()
    assert set(routes) == {"/", "/view", "/view.json"}
    first = [routes[p]() for p in ("/", "/view", "/view.json")] * 10
    assert len(drawn) == 1 and pages.builds == 1
    assert len({body for _, body in first}) == 2  # one HTML, one JSON, made once each
    clock.now += 0.999
    routes["/view.json"]()
    assert len(drawn) == 1
    clock.now += 0.001
    ctype, body = routes["/view.json"]()
    assert len(drawn) == 2 and ctype == "application/json"
    assert view_from_dict(json.loads(body)).title == "picture 2"
    ctype, page = routes["/"]()
    assert ctype.startswith("text/html")
    assert f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'.encode() in page
    assert b"picture 2" in page


def test_rate_limit_lets_per_second_through_then_refills() -> None:
    clock = Clock()
    limit = RateLimit(3, clock=clock)
    assert [limit.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.34  # one token back (3 a second)
    assert limit.take() and not limit.take()
    clock.now += 10  # never more than a second's worth
    assert [limit.take() for _ in range(4)] == [True, True, True, False]
