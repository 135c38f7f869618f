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
