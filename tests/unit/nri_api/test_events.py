"""Event enum, subscription masks and NRIVersion parsing/ordering."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_api import api
from nri_api.events import (
    MASK_BEFORE_V0_10,
    MASK_V0_10,
    Event,
    NRIVersion,
    event_mask,
    events_in_mask,
    has_dedicated_event_rpcs,
    parse_nri_version,
    supported_events,
    valid_events_mask,
)


def test_event_mirror_matches_the_schema_enum() -> None:
    schema = {v.name: v.number for v in api.Event.DESCRIPTOR.values if v.name != "LAST"}
    assert {e.name: e.value for e in Event} == schema
    assert api.Event.Value("LAST") == max(Event) + 1


@pytest.mark.parametrize(
    ("events", "mask"),
    [
        pytest.param([], 0, id="none"),
        pytest.param([Event.RUN_POD_SANDBOX], 0x1, id="first"),
        pytest.param([Event.CREATE_CONTAINER], 0x8, id="create"),
        pytest.param([Event.REMOVE_CONTAINER], 0x400, id="last-pre-v0.10"),
        pytest.param([Event.UPDATE_POD_SANDBOX], 0x800, id="update-pod"),
        pytest.param([Event.VALIDATE_CONTAINER_ADJUSTMENT], 0x2000, id="validate"),
        pytest.param([4, 8, 10], 0x8 | 0x80 | 0x200, id="ints"),
        pytest.param([Event.CREATE_CONTAINER, Event.CREATE_CONTAINER], 0x8, id="duplicate"),
    ],
)
def test_event_mask(events: list[Event | int], mask: int) -> None:
    assert event_mask(events) == mask
    assert events_in_mask(mask) == frozenset(Event(e) for e in events)


def test_all_events_fill_the_v0_10_mask() -> None:
    every = [e for e in Event if e is not Event.UNKNOWN]
    assert event_mask(every) == MASK_V0_10 == 0x3FFF
    assert event_mask(e for e in every if e <= Event.REMOVE_CONTAINER) == MASK_BEFORE_V0_10


@pytest.mark.parametrize(
    ("bad", "subject"), [(0, "event UNKNOWN"), (15, "event 15"), (-1, "event -1"), (99, "event 99")]
)
def test_event_mask_rejects_unknown_and_out_of_range(bad: int, subject: str) -> None:
    with pytest.raises(ValueError, match=subject):
        event_mask([Event.CREATE_CONTAINER, bad])


@pytest.mark.parametrize("mask", [0x4000, 0x8000_0000, 0x7FFF])
def test_events_in_mask_rejects_bits_without_an_event(mask: int) -> None:
    with pytest.raises(ValueError, match="unknown bits 0x"):
        events_in_mask(mask)


def test_events_in_mask_rejects_negative() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        events_in_mask(-1)


@given(st.sets(st.sampled_from([e for e in Event if e is not Event.UNKNOWN])))
def test_mask_round_trip(events: set[Event]) -> None:
    assert events_in_mask(event_mask(events)) == events


@pytest.mark.parametrize(
    ("version", "mask"),
    [
        pytest.param(None, 0x7FF, id="unknown"),
        pytest.param("v0.2.0", 0x7FF, id="v0.2.0"),
        pytest.param("v0.3.0", 0x7FF, id="v0.3.0"),
        pytest.param("v0.9.0", 0x7FF, id="v0.9.0"),
        pytest.param("v0.9.1-0.20250219030224-e597e7849f24", 0x7FF, id="v0.9.1-pseudo"),
        pytest.param("v0.10.0-rc.1", 0x7FF, id="v0.10.0-rc"),
        pytest.param("v0.10.0", 0x3FFF, id="v0.10.0"),
        pytest.param("v0.11.0", 0x3FFF, id="v0.11.0"),
        pytest.param("v0.12.2", 0x3FFF, id="v0.12.2"),
        pytest.param("v1.0.0", 0x3FFF, id="v1.0.0"),
    ],
)
def test_valid_events_mask(version: str | None, mask: int) -> None:
    parsed = None if version is None else NRIVersion.parse(version)
    assert valid_events_mask(parsed) == mask
    assert event_mask(supported_events(parsed)) == mask


@pytest.mark.parametrize(
    ("version", "dedicated"),
    [(None, False), ("v0.11.0", False), ("v0.12.0-rc.1", False), ("v0.12.0", True)],
)
def test_dedicated_event_rpcs(version: str | None, dedicated: bool) -> None:
    parsed = None if version is None else NRIVersion.parse(version)
    assert has_dedicated_event_rpcs(parsed) is dedicated


@pytest.mark.parametrize(
    ("text", "expected", "as_text"),
    [
        ("v0.12.2", NRIVersion(0, 12, 2), "v0.12.2"),
        ("0.12.2", NRIVersion(0, 12, 2), "v0.12.2"),
        (" v0.3.0\n", NRIVersion(0, 3, 0), "v0.3.0"),
        ("v1.2", NRIVersion(1, 2, 0), "v1.2.0"),
        ("v0.12.0-rc.1", NRIVersion(0, 12, 0, "rc.1"), "v0.12.0-rc.1"),
        (
            "v0.3.1-0.20230504231226-94185418e253",
            NRIVersion(0, 3, 1, "0.20230504231226-94185418e253"),
            "v0.3.1-0.20230504231226-94185418e253",
        ),
        ("v0.12.2-3-gabc1234", NRIVersion(0, 12, 2), "v0.12.2"),
        ("v0.12.2+build.7", NRIVersion(0, 12, 2), "v0.12.2"),
    ],
)
def test_parse(text: str, expected: NRIVersion, as_text: str) -> None:
    assert NRIVersion.parse(text) == expected
    assert str(NRIVersion.parse(text)) == as_text


@pytest.mark.parametrize("text", ["", "v", "12", "x0.12.2", "v0.12.2.1", "v01.2.3", "latest"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="NRI version"):
        NRIVersion.parse(text)


@pytest.mark.parametrize(
    "text", ["", "  ", "unknown", "(devel)", "0.0.0-unknown", "v0.0.0-unknown"]
)
def test_unknown_spellings_parse_to_none(text: str) -> None:
    assert parse_nri_version(text) is None


def test_parse_nri_version_still_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="'garbage'"):
        parse_nri_version("garbage")


def test_pseudo_versions() -> None:
    pseudo = NRIVersion.parse("v0.3.1-0.20230504231226-94185418e253")
    assert pseudo.is_pseudo
    assert NRIVersion.parse("v0.3.0") < pseudo < NRIVersion.parse("v0.3.1")
    assert NRIVersion.parse("v0.0.0-20230504231226-94185418e253").is_pseudo
    assert not NRIVersion.parse("v0.12.0-rc.1").is_pseudo
    assert not NRIVersion.parse("v0.12.0").is_pseudo


def test_semver_precedence() -> None:
    ordered = [
        "v0.2.0",
        "v0.3.0",
        "v0.3.1-0.20230504231226-94185418e253",
        "v0.3.1",
        "v0.9.0",
        "v0.10.0-alpha",
        "v0.10.0-alpha.1",
        "v0.10.0-alpha.beta",
        "v0.10.0-beta.2",
        "v0.10.0-beta.11",
        "v0.10.0-rc.1",
        "v0.10.0",
        "v0.12.2",
        "v1.0.0",
    ]
    parsed = [NRIVersion.parse(t) for t in ordered]
    assert sorted(reversed(parsed)) == parsed
    for a, b in itertools.pairwise(parsed):
        assert a < b and b > a and a != b and a <= b


def test_versions_are_hashable_values() -> None:
    assert len({NRIVersion.parse("0.12.2"), NRIVersion.parse("v0.12.2")}) == 1
    with pytest.raises(AttributeError):
        NRIVersion.parse("v0.12.2").major = 1  # type: ignore[misc]
