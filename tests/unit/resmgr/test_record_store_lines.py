"""The record store's lines are `encode_line`'s, whatever it kept: a kept line tail is
used again only for the same meaning and memory nodes, and each record gets the head of
its own CPUs (`RecordStore.change`)."""

from __future__ import annotations

from pathlib import Path

from nri_resmgr.model import ContainerID
from nri_resmgr.policy.kit.records import PlacementRecord, encode_line
from nri_resmgr.runtime.record_store import RECORD_FILE, SLACK, RecordStore
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
    assert {cid: encode_line(r) for cid, r in want.items()} == {
        cid: store._line(cid) for cid in store._heads
    }
    assert RecordStore(store.path, scope=SCOPE, log=QUIET).load() == want


def test_a_change_of_cpus_alone_is_written_as_a_move_and_read_back(tmp_path: Path) -> None:
    """Records whose only change is their CPUs go into the block as their ids under the
    new CPUs, one entry per CPU set, not as lines; a change of anything else, or a
    record not yet written, is a line."""
    store = RecordStore(tmp_path / RECORD_FILE, scope=SCOPE, log=QUIET)
    wide, narrow, other = IDSet.parse("1-27"), IDSet.parse("2-27"), IDSet.parse("40-41")
    node0 = IDSet.parse("0")
    live = {ContainerID(c): _rec(c, wide, node0, MEANING) for c in ("a", "b", "c", "d")}
    store.change(live)
    store.flush()
    size = store.path.stat().st_size
    moved = {cid: _rec(cid, narrow, node0, MEANING) for cid in (ContainerID("a"), ContainerID("b"))}
    moved[ContainerID("c")] = _rec("c", other, node0, MEANING)
    moved[ContainerID("d")] = _rec("d", narrow, node0, {**MEANING, "pool": 2})
    moved[ContainerID("e")] = _rec("e", narrow, node0, MEANING)  # new: its line
    store.change(moved)
    store.flush()
    block = store.path.read_bytes()[size:].decode()
    assert '"moved":{"2-27":["a","b"],"40-41":["c"]}' in block, block
    put = block[block.index('"put":') :]
    assert '"id":"d"' in put and '"id":"e"' in put and '"id":"a"' not in put, block
    assert RecordStore(store.path, scope=SCOPE, log=QUIET).load() == {**live, **moved}


def test_moves_compact_by_the_bytes_they_append_not_their_count(tmp_path: Path) -> None:
    """The journal may hold as many bytes as the base (plus `SLACK` mean lines): a
    decision that moves every record appends a short block, and the file compacts once
    its blocks outweigh the base, not once their entries outnumber the records."""
    store = RecordStore(tmp_path / RECORD_FILE, scope=SCOPE, log=QUIET)
    node0 = IDSet.parse("0")
    meaning = {**MEANING, "request": "x" * 200}  # lines much longer than a move
    live = {ContainerID(f"c{i}"): _rec(f"c{i}", IDSet.parse("1-27"), node0, meaning)
            for i in range(SLACK)}  # fmt: skip
    store.change(live)
    store.flush()
    base = store.path.stat().st_size
    compactions = 0
    for n in range(40):
        cpus = IDSet.parse(f"{1 + n % 2}-27")
        live = {cid: _rec(cid, cpus, node0, meaning) for cid in live}
        before = store.path.stat().st_size
        store.change(live)
        store.flush()
        size = store.path.stat().st_size
        compactions += size <= before
        assert size <= 2 * base + SLACK * base // len(live) + 1024, (n, size)
        assert RecordStore(store.path, scope=SCOPE, log=QUIET).load() == live
    # each block moves SLACK records: counted in entries, every other one compacted
    assert 1 <= compactions <= 4, compactions
