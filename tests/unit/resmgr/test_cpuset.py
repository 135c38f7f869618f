"""CPU/node id sets: the kernel list format, set algebra, and malformed input."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError, NodeSet, union

ids = st.frozensets(st.integers(min_value=0, max_value=600), max_size=80)


@given(ids)
def test_format_parse_round_trip(s: frozenset[int]) -> None:
    text = str(IDSet(s))
    assert IDSet.parse(text) == IDSet(s)
    assert IDSet.parse(text).ids() == s


@given(ids)
def test_format_is_canonical(s: frozenset[int]) -> None:
    """Ascending, maximal ranges: no element could be merged with its neighbour."""
    text = str(IDSet(s))
    if not s:
        assert text == ""
        return
    bounds: list[tuple[int, int]] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        bounds.append((int(first), int(last or first)))
    for lo, hi in bounds:
        assert lo <= hi
    for (_, prev_hi), (lo, _) in itertools.pairwise(bounds):
        assert lo > prev_hi + 1, f"{text}: ranges {prev_hi} and {lo} should have merged"


@given(ids, ids)
def test_algebra_matches_frozenset(a: frozenset[int], b: frozenset[int]) -> None:
    x, y = IDSet(a), IDSet(b)
    assert (x | y).ids() == a | b
    assert (x & y).ids() == a & b
    assert (x - y).ids() == a - b
    assert len(x) == len(a)
    assert list(x) == sorted(a)
    assert x.isdisjoint(y) == a.isdisjoint(b)
    assert (x <= y) == (a <= b)
    assert union([x, y]) == IDSet(a | b)
    assert x.first(3).ids() == frozenset(sorted(a)[:3])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", [], id="empty"),
        pytest.param("  \n", [], id="whitespace-is-empty"),
        pytest.param("0-3,8", [0, 1, 2, 3, 8], id="range-and-single"),
        pytest.param("8,0-3", [0, 1, 2, 3, 8], id="unordered"),
        pytest.param(" 1 , 3 \n", [1, 3], id="spaces-and-newline"),
        pytest.param("5-5", [5], id="one-element-range"),
        pytest.param("0-1,1-2", [0, 1, 2], id="overlapping"),
    ],
)
def test_parse_valid(text: str, expected: list[int]) -> None:
    assert IDSet.parse(text).sorted() == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1-", id="open-range"),
        pytest.param("-1", id="negative"),
        pytest.param("a", id="not-a-number"),
        pytest.param("3-1", id="reversed-range"),
        pytest.param("1,,2", id="empty-element"),
        pytest.param("1,", id="trailing-comma"),
        pytest.param("1-2-3", id="double-range"),
        pytest.param("0x3", id="hex"),
        pytest.param("1.5", id="fraction"),
    ],
)
def test_parse_malformed_names_the_text(text: str) -> None:
    with pytest.raises(IDSetError, match=re.escape(repr(text.strip()))):
        IDSet.parse(text)


@pytest.mark.parametrize("bad", [-1, "3", 1.0, True])
def test_constructor_rejects_non_ids(bad: object) -> None:
    with pytest.raises(IDSetError, match=re.escape(repr(bad))):
        IDSet([0, bad])  # type: ignore[list-item]


def test_immutable_hashable_and_aliases() -> None:
    s = IDSet.parse("0-3")
    with pytest.raises(AttributeError):
        s._ids = frozenset()
    assert {s: 1}[IDSet([0, 1, 2, 3])] == 1
    assert CPUSet is IDSet and NodeSet is IDSet
    assert repr(s) == "IDSet('0-3')"
    assert not IDSet() and IDSet([0])
    assert 2 in s and 4 not in s


def test_parse_reports_every_bad_element() -> None:
    # issue 10 item 4: "0-1,x,5-3" used to report only the "x".
    with pytest.raises(IDSetError) as info:
        IDSet.parse("0-1,x,5-3")
    assert len(info.value.problems) == 2
    assert "'x' is not an id or a range" in info.value.problems[0]
    assert "'5-3' is empty" in info.value.problems[1]


@pytest.mark.parametrize("text", ["0-4294967295", "0-9999999", "8192", "1" * 5000])
def test_parse_bounds_ids_before_expanding_ranges(text: str) -> None:
    # issue 11 item 3: "0-4294967295" exhausted memory; "0-9999999" blocked the loop.
    with pytest.raises(IDSetError, match="above 8191"):
        IDSet.parse(text)


def test_parse_bound_is_a_parameter() -> None:
    assert IDSet.parse("0-15", max_id=15) == IDSet(range(16))
    with pytest.raises(IDSetError, match="above 15"):
        IDSet.parse("0-16", max_id=15)


@pytest.mark.parametrize("text", ["\u0663", "1_0", "+1"])
def test_parse_takes_ascii_decimal_only(text: str) -> None:
    with pytest.raises(IDSetError, match="not an id"):
        IDSet.parse(text)
