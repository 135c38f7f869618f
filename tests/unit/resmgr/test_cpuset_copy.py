"""IDSet survives pickling and copying (the immutability guard must not block them)."""

import copy
import pickle

from nri_resmgr.topology.cpuset import IDSet


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
