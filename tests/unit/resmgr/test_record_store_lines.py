"""The record store's lines are `encode_line`'s, whatever it kept: a kept line tail is
used again only for the same meaning and memory nodes, and each record gets the head of
its own CPUs (`RecordStore.change`)."""

from __future__ import annotations

from pathlib import Path

from nri_resmgr.model import ContainerID
from nri_resmgr.policy.kit.records import PlacementRecord, encode_line
from nri_resmgr.runtime.record_store import RECORD_FILE, RecordStore
from nri_resmgr.topology.cpuset import IDSet
from tests.support.logs import QUIET

SCOPE = "topology-aware/abc"
MEANING = {"pool": 1, "kind": "shared"}


def _rec(cid: str, cpus: IDSet, mems: IDSet, meaning: dict[str, object]) -> PlacementRecord:
    return PlacementRecord(ContainerID(cid), cpus, mems, meaning)  # type: ignore[arg-type]


def test_every_line_is_encode_lines_after_changes_of_cpus_nodes_and_meanings(
    tmp_path: Path,
) -> None:
    store = RecordStore(tmp_path / RECORD_FILE, scope=SCOPE, log=QUIET)
    wide, narrow, other = IDSet.parse("1-27"), IDSet.parse("2-27"), IDSet.parse("40-41")
    node0, node1 = IDSet.parse("0"), IDSet.parse("1")
    first = [_rec(c, wide, node0, MEANING) for c in ("a", "b", "c", "d")]
    store.change({r.container_id: r for r in first})
    store.flush()
    then = [
        _rec("a", narrow, node0, MEANING),  # only the CPUs: the kept tail
        _rec("b", narrow, node1, MEANING),  # other memory nodes
        _rec("c", other, node0, MEANING),  # other CPUs within one change
        _rec("d", narrow, node0, {**MEANING, "pool": 2}),  # another meaning
    ]
    store.change({r.container_id: r for r in then})
    store.flush()
    want = {r.container_id: r for r in then}
    assert {cid: encode_line(r) for cid, r in want.items()} == store._lines
    assert RecordStore(store.path, scope=SCOPE, log=QUIET).load() == want
