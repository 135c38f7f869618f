"""The policy registry: built-ins by entry point, drop-ins by directory, clear errors."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import EntryPoints, entry_points
from pathlib import Path

import pytest

from nri_resmgr import policy_registry
from nri_resmgr.model import ConfigError, CPUKind
from nri_resmgr.policy.none import NonePolicy
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.policy_registry import ENTRY_POINT_GROUP, available_policies, load_policy
from tests.support.builders import ctr, small
from tests.support.requirements import REPO

PLUGINS = REPO / "plugins.d"


@pytest.mark.parametrize(
    ("name", "cls"), [("none", NonePolicy), ("static", StaticPolicy)], ids=["none", "static"]
)
def test_builtins_load_by_name(name: str, cls: type) -> None:
    assert isinstance(load_policy(name, topology=small(), config={}), cls)


@pytest.fixture
def fresh_group() -> Iterator[None]:
    """The group read anew by the test, and again by whoever comes after it."""
    policy_registry._entry_points.cache_clear()
    yield
    policy_registry._entry_points.cache_clear()


def test_the_entry_point_group_is_read_once_per_process(
    fresh_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []

    def counted(*, group: str) -> EntryPoints:
        reads.append(group)
        return entry_points(group=group)

    monkeypatch.setattr(policy_registry, "entry_points", counted)
    first = available_policies()
    load_policy("none", topology=small(), config={})
    assert list(available_policies()) == list(first)
    assert {"none", "static", "topology-aware", "balloons"} <= set(first)
    assert reads == [ENTRY_POINT_GROUP]


def test_topology_aware_is_listed_and_loads() -> None:
    assert {"none", "static", "topology-aware"} <= set(available_policies())
    p = load_policy("topology-aware", topology=small(), config={})
    assert type(p).__name__ == "TopologyAwarePolicy"


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        load_policy("balloonz", topology=small(), config={})
    assert str(exc.value).startswith(
        "unknown policy 'balloonz'; expected one of balloons, none, static"
    )


def test_drop_in_spread_loads_and_decides() -> None:
    assert available_policies([PLUGINS])["spread"].origin.endswith("example_spread.py")
    p = load_policy("spread", topology=small(), config={}, plugin_dirs=[PLUGINS])
    s = p.initial_state()
    got = []
    for i in range(5):
        d = p.allocate(s, ctr(f"c{i}", pod=f"p{i}"))
        s = d.state
        assert d.assignment is not None and d.assignment.kind is CPUKind.SHARED
        got.append((str(d.assignment.cpus), str(d.assignment.mems)))
    assert got == [
        ("0-1,8-9", "0"),
        ("2-3,10-11", "1"),
        ("4-5,12-13", "2"),
        ("6-7,14-15", "3"),
        ("0-1,8-9", "0"),
    ]
    s = p.release(s, ctr("c1", pod="p1").id).state
    d = p.allocate(s, ctr("x", pod="px"))
    assert d.assignment is not None and str(d.assignment.mems) == "1"


def test_drop_in_config_error() -> None:
    with pytest.raises(
        ConfigError, match="policy spread: unknown configuration key 'x'; expected none"
    ):
        load_policy("spread", topology=small(), config={"x": 1}, plugin_dirs=[PLUGINS])


def test_duplicate_name_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "dup.py").write_text(
        (PLUGINS / "example_spread.py").read_text().replace('"spread"', '"static"')
    )
    with pytest.raises(ConfigError, match="policy 'static' is defined twice"):
        available_policies([tmp_path])


def test_broken_drop_in_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match=r"bad\.py: import failed: RuntimeError\('boom'\)"):
        available_policies([tmp_path])


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        available_policies([tmp_path / "nope"])
