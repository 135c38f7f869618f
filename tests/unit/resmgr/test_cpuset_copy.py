"""IDSet survives pickling and copying (the immutability guard must not block them)."""

import copy
import pickle
from collections.abc import Iterable

import pytest

from nri_resmgr.topology.cpuset import IDSet, union


def test_pickle_and_copies_round_trip() -> None:
    s = IDSet.parse("0-3,8,10-11")
    assert pickle.loads(pickle.dumps(s)) == s
    assert copy.deepcopy(s) == s
    assert copy.copy(s) == s
    assert str(pickle.loads(pickle.dumps(IDSet()))) == ""


def test_the_list_form_is_made_once_and_copies_keep_the_value() -> None:
    """str() is cached (a pool's cpuset is rendered into every update of an exclusive
    grant's reply); the cache is not part of the value."""
    s = IDSet.parse("0-3,8,10-11")
    assert str(s) is str(s)
    for other in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s), copy.copy(s)):
        assert other == s and hash(other) == hash(s)
        assert str(other) == "0-3,8,10-11"


def test_sets_made_from_checked_sets_are_not_checked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Set algebra and parsing build their result without the per-id check of
    `IDSet(...)` (40,000 sets in a Synchronize of 1,000 containers), and the results
    are ordinary, immutable IDSets."""
    a, b = IDSet.parse("0-3,8"), IDSet([2, 3, 9])
    checked: list[object] = []
    real_init = IDSet.__init__

    def counting_init(self: IDSet, ids: Iterable[int] = ()) -> None:
        checked.append(ids)
        real_init(self, ids)

    monkeypatch.setattr(IDSet, "__init__", counting_init)
    results = [a | b, a & b, a - b, a.first(2), union([a, b]), IDSet.parse("4-5")]
    assert checked == []
    assert [str(r) for r in results] == ["0-3,8-9", "2-3", "0-1,8", "0-1", "0-3,8-9", "4-5"]
    assert results[0] == IDSet([0, 1, 2, 3, 8, 9]) and hash(results[1]) == hash(IDSet([2, 3]))
    with pytest.raises(AttributeError, match="immutable"):
        results[0]._ids = frozenset()
