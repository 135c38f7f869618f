"""Placement records (issue 24): the file form, the store, the one restart rule.

The file: a round trip keeps every record; a torn, edited, foreign, newer or oversized
file is refused with a message naming the file and the problem, and the store then
logs it and reads no records (never a crash).  The store writes atomically: a left-over
temporary file is never read.  The rule (`kit.rebuild.restart`): a record counts only
where the report equals it; an idle restart restores the state exactly and moves
nobody; a container no record names is placed on the restored state; a record that
differs from its report sends every container through the rebuild, with the cause in
the reason.  Through the pipeline: each commit keeps the records, and a new pipeline
given the runtime's report moves nothing.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_api import api
from nri_resmgr.model import ContainerID, CPUKind, QoSClass
from nri_resmgr.policy.kit.rebuild import RESTORED, records_of, restart
from nri_resmgr.policy.kit.records import (
    SCHEMA_VERSION,
    PlacementRecord,
    RecordError,
    decode,
    encode,
    encode_block,
    encode_head,
    encode_line,
    encode_meaning,
)
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy
from nri_resmgr.policy_registry import available_policies, load_policy
from nri_resmgr.runtime.pipeline import Pipeline
from nri_resmgr.runtime.record_store import RECORD_FILE, SLACK, RecordStore
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import ctr, topo, with_current
from tests.support.logs import QUIET, CapturedLog
from tests.support.pipeline import container, sandbox
from tests.support.restart_rule import assert_restart_exact, through_the_file

SCOPE = "static/abc"
_VERSION = f'"version": {SCHEMA_VERSION}'.encode()


def _rec(cid: str, cpus: str, exclusive: str = "") -> PlacementRecord:
    return PlacementRecord(
        ContainerID(cid), IDSet.parse(cpus), IDSet(), {"exclusive": exclusive, "milli": 1000}
    )


def _file(*records: PlacementRecord, scope: str = SCOPE) -> bytes:
    return encode(scope, [encode_line(r) for r in records])


# ---- the file form --------------------------------------------------------------------


def test_round_trip_keeps_every_record() -> None:
    a, b = _rec("a", "1", "1"), _rec("b", "0,2-3")
    assert decode(_file(a, b), scope=SCOPE, source="f") == {a.container_id: a, b.container_id: b}


@pytest.mark.parametrize(
    ("mangle", "expected"),
    [
        (lambda d: d[:-3], "checksum"),  # torn mid-write
        (lambda d: d.replace(b'"0,2-3"', b'"0,2-4"'), "checksum"),  # edited
        (lambda d: b"", "expected a header line"),
        (lambda d: b"garbage\n" + d, "expected a header line"),
        (lambda d: d.replace(_VERSION, b'"version": 99'), "schema version 99"),
        (lambda d: d.replace(_VERSION, b'"version": 1'), "schema version 1"),  # no layout
        (lambda d: d.replace(SCOPE.encode(), b"balloons/zzz"), "another policy"),
        (lambda d: d.replace(b'"count": 2', b'"count": 3'), "3"),
    ],
)
def test_a_corrupt_or_foreign_file_is_refused_with_its_problem(mangle, expected) -> None:  # type: ignore[no-untyped-def]
    data = mangle(_file(_rec("a", "1", "1"), _rec("b", "0,2-3")))
    with pytest.raises(RecordError, match=expected) as info:
        decode(data, scope=SCOPE, source="/state/placements.jsonl")
    assert "/state/placements.jsonl" in str(info.value)


@given(
    cid=st.text(min_size=1, max_size=12),
    cpus=st.frozensets(st.integers(0, 300), max_size=8),
    meaning=st.dictionaries(
        st.text(max_size=8),
        st.integers(-(2**40), 2**40) | st.text(max_size=8) | st.booleans(),
        max_size=5,
    ),
)
def test_a_line_is_the_records_json_with_sorted_keys(cid, cpus, meaning) -> None:  # type: ignore[no-untyped-def]
    """The line built from its parts is what `json.dumps` writes (sorted keys, no
    spaces), with or without the meaning's JSON handed in."""
    r = PlacementRecord(ContainerID(cid), IDSet(cpus), IDSet(), meaning)
    doc = {"id": cid, "cpus": str(r.cpus), "mems": "", "meaning": meaning}
    expected = json.dumps(doc, separators=(",", ":"), sort_keys=True)
    assert encode_line(r) == expected
    assert encode_line(r, encode_meaning(meaning)) == expected


def test_a_bad_line_and_a_repeated_id_are_refused() -> None:
    for line in ['{"id":"","cpus":"","mems":"","meaning":{}}', '{"id":"a"}', "[1]",
                 '{"id":"a","cpus":"x","mems":"","meaning":{}}',
                 '{"id":"a","cpus":"","mems":"","meaning":{"k":[1]}}']:  # fmt: skip
        with pytest.raises(RecordError, match="f:2"):
            decode(encode(SCOPE, [line]), scope=SCOPE, source="f")
    twice = encode_line(_rec("a", "1"))
    with pytest.raises(RecordError, match="recorded twice"):
        decode(encode(SCOPE, [twice, twice]), scope=SCOPE, source="f")


def test_schema_version_is_the_one_written() -> None:
    assert f'"version": {SCHEMA_VERSION}'.encode() in _file()


# ---- the store ------------------------------------------------------------------------


def test_store_writes_atomically_and_reads_back(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "d" / RECORD_FILE, scope=SCOPE, log=QUIET)
    a, b = _rec("a", "1", "1"), _rec("b", "0")
    store.change({a.container_id: a, b.container_id: b})
    store.flush()
    store.change({}, gone=[b.container_id])
    store.flush()
    assert RecordStore(store.path, scope=SCOPE, log=QUIET).load() == {a.container_id: a}
    # a torn temporary file left by a kill mid-write is never read
    (tmp_path / "d" / (RECORD_FILE + ".tmp")).write_bytes(b"torn")
    assert RecordStore(store.path, scope=SCOPE, log=QUIET).load() == {a.container_id: a}


def test_store_logs_a_corrupt_file_and_reads_nothing(tmp_path: Path) -> None:
    path = tmp_path / RECORD_FILE
    path.write_bytes(_file(_rec("a", "1"))[:-2])
    log = CapturedLog()
    assert RecordStore(path, scope=SCOPE, log=log.log).load() == {}
    [line] = log.events("placement records not used")
    assert line["method"] == "warning" and "checksum" in line["error"], line


def test_store_drops_the_file_when_a_write_fails(tmp_path: Path) -> None:
    path = tmp_path / RECORD_FILE
    path.write_bytes(_file(_rec("a", "1")))
    blocked = tmp_path / (RECORD_FILE + ".tmp")
    blocked.mkdir()  # the temporary file cannot be opened
    store = RecordStore(path, scope=SCOPE, log=QUIET)
    store.change({ContainerID("b"): _rec("b", "0")})
    store.flush()
    assert not path.exists(), "an old file must not outlive a failed write"


def test_journal_blocks_apply_in_order_over_the_base() -> None:
    a, b, c = _rec("a", "1", "1"), _rec("b", "0"), _rec("c", "2")
    moved = _rec("b", "3")
    data = _file(a, b) + (encode_block([encode_line(c)], []) + "\n").encode()
    data += (encode_block([encode_line(moved)], [a.container_id]) + "\n").encode()
    assert decode(data, scope=SCOPE, source="f") == {"b": moved, "c": c}


def test_a_blocks_moves_apply_after_its_lines_and_only_to_records_it_has() -> None:
    a, b, c = _rec("a", "1", "1"), _rec("b", "0"), _rec("c", "2")
    block = encode_block([encode_line(c)], [a.container_id], [(encode_head(IDSet.parse("3")),
                         [b.container_id, c.container_id])])  # fmt: skip
    data = _file(a, b) + (block + "\n").encode()
    assert decode(data, scope=SCOPE, source="f") == {
        "b": dataclasses.replace(b, cpus=IDSet.parse("3")),
        "c": dataclasses.replace(c, cpus=IDSet.parse("3")),
    }
    unknown = encode_block([], [], [(encode_head(IDSet.parse("3")), [a.container_id])])
    with pytest.raises(RecordError, match="f:3: moved 'a', which has no record"):
        decode(_file(b) + (unknown + "\n").encode(), scope=SCOPE, source="f")
    # schema version 2 (no moves) is still read, and a move in it is refused
    old = _file(a, b).replace(_VERSION, b'"version": 2')
    assert decode(old, scope=SCOPE, source="f") == {"a": a, "b": b}
    with pytest.raises(RecordError, match="f:4: moves in a block of schema version 2"):
        decode(old + (block + "\n").encode(), scope=SCOPE, source="f")


def test_a_torn_last_block_is_not_read_and_an_edited_one_refuses_the_file() -> None:
    a, b = _rec("a", "1", "1"), _rec("b", "0")
    block = (encode_block([encode_line(b)], [a.container_id]) + "\n").encode()
    for cut in (1, len(block) // 2, len(block) - 1):  # a kill -9 inside the append
        assert decode(_file(a) + block[:cut], scope=SCOPE, source="f") == {"a": a}
    edited = block.replace(b'"cpus":"0"', b'"cpus":"4"')
    with pytest.raises(RecordError, match="f:3: block checksum"):
        decode(_file(a) + edited, scope=SCOPE, source="f")
    with pytest.raises(RecordError, match="f:3: expected a journal block"):
        decode(_file(a) + encode_line(b).encode() + b"\n", scope=SCOPE, source="f")


def test_store_appends_what_a_decision_changed_and_compacts_past_the_live_set(
    tmp_path: Path,
) -> None:
    path = tmp_path / RECORD_FILE
    store = RecordStore(path, scope=SCOPE, log=QUIET)
    live = {ContainerID(f"c{i}"): _rec(f"c{i}", str(i % 4)) for i in range(20)}
    store.change(live)
    store.flush()  # the store's first write is whole
    assert len(path.read_bytes().splitlines()) == 1 + 20
    size = path.stat().st_size
    store.change({ContainerID("c1"): _rec("c1", "3")})
    store.flush()
    added = path.read_bytes()[size:]
    assert added.count(b"\n") == 1 and b'"c1"' in added and b'"c2"' not in added, added
    live[ContainerID("c1")] = _rec("c1", "3")
    assert RecordStore(path, scope=SCOPE, log=QUIET).load() == live
    for n in range(200):  # many decisions: the file stays within the live set and SLACK
        cid = ContainerID(f"c{n % 20}")
        live[cid] = _rec(cid, str(n % 4), str(n % 3))
        store.change({cid: live[cid]})
        store.flush()
        lines = len(path.read_bytes().splitlines())
        assert lines <= 1 + 20 + 20 + SLACK + 1, (n, lines)
        assert RecordStore(path, scope=SCOPE, log=QUIET).load() == live
    # a new store's first write compacts, so no block ever follows a torn tail
    with path.open("ab") as f:
        f.write(b'{"sha256":"torn')
    again = RecordStore(path, scope=SCOPE, log=QUIET)
    again.replace(again.load())
    again.flush()
    assert b"torn" not in path.read_bytes()
    assert RecordStore(path, scope=SCOPE, log=QUIET).load() == live


def test_an_unwritable_directory_warns_once_per_compaction_interval(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    log = CapturedLog()
    store = RecordStore(tmp_path / "file" / RECORD_FILE, scope=SCOPE, log=log.log)
    for n in range(3 * SLACK):
        store.change({ContainerID("a"): _rec("a", str(n % 2))})
        store.flush()
    dropped = log.events("placement records dropped")
    assert 2 <= len(dropped) <= 4, len(dropped)
    assert "not written" in dropped[0]["error"], dropped[0]


# ---- the rule -------------------------------------------------------------------------


def _static() -> StaticPolicy:
    return StaticPolicy(topology=topo(packages=1, nodes=1, cores=4, threads=1),
                        config={"reservedSystemCPUs": "0"})  # fmt: skip


def _placed(p: StaticPolicy):  # type: ignore[no-untyped-def]
    g1 = ctr("g1", qos=QoSClass.GUARANTEED, milli=1000, cid="g1")
    g2 = ctr("g2", qos=QoSClass.GUARANTEED, milli=1000, cid="g2")
    b = ctr("b", qos=QoSClass.BURSTABLE, milli=500, cid="b")
    s = p.initial_state()
    for c in (g1, g2, b):
        s = p.allocate(s, c).state
    s = p.release(s, g1.id).state  # a grant came and went
    rendered = p.render(s)
    reports = [with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in (g2, b)]
    return s, reports, records_of(p, s, rendered)


def test_an_idle_restart_restores_the_state_and_moves_nobody() -> None:
    p = _static()
    s, reports, records = _placed(p)
    d = restart(p, reports, records)
    assert (d.state, d.updates, d.reason) == (s, (), RESTORED)


def test_a_record_that_differs_from_its_report_rebuilds_with_the_cause() -> None:
    p = _static()
    _, reports, records = _placed(p)
    changed = [reports[0], with_current(reports[1], IDSet.parse("1-3"), None)]
    d = restart(p, changed, records)
    assert "differ from the report" in d.reason and "b" in d.reason


def test_a_container_no_record_names_is_placed_on_the_restored_state() -> None:
    p = _static()
    s, reports, records = _placed(p)
    n = ctr("n", qos=QoSClass.GUARANTEED, milli=1000, cid="n")
    new = with_current(n, IDSet.parse("0-3"), None)
    d = restart(p, [*reports, new], records)
    assert d.reason.startswith(RESTORED) and "placed 1 unrecorded" in d.reason
    assert {u.container_id for u in d.updates} >= {new.id}
    assert d.state.entries[reports[0].id] == s.entries[reports[0].id], "the recorded grant stays"


def test_records_the_policy_would_not_grant_are_not_used() -> None:
    p = _static()
    _, reports, records = _placed(p)
    g2 = reports[0].id
    meaning = {"exclusive": "0", "milli": 1000}  # the reserved CPU
    bad = dataclasses.replace(records[g2], meaning=meaning, cpus=IDSet([0]))
    d = restart(p, [with_current(reports[0], IDSet([0]), None), reports[1]], {**records, g2: bad})
    assert "records not used" in d.reason, d.reason


# ---- through the pipeline -------------------------------------------------------------


def test_pipeline_keeps_records_and_a_new_pipeline_moves_nothing(tmp_path: Path) -> None:
    t = topo(packages=1, nodes=1, cores=4, threads=1)

    def pipeline() -> Pipeline:
        store = RecordStore(tmp_path / RECORD_FILE, scope=SCOPE, log=QUIET)
        stores.append(store)
        return Pipeline(StaticPolicy(topology=t, config={"reservedSystemCPUs": "0"}),
                        log=QUIET, record_store=store)  # fmt: skip

    stores: list[RecordStore] = []
    first = pipeline()
    db, web = sandbox("db"), sandbox("web", guaranteed=False)
    made = []
    for pod, name, cpu, limit in [(db, "a", "1", "1"), (web, "w", "500m", None),
                                  (db, "b", "1", "1")]:  # fmt: skip
        c = container(pod, name, cpu=cpu, limit=limit)
        first.create(pod, c)
        made.append(c)
    first.remove(db, made[0])
    assert set(RecordStore(tmp_path / RECORD_FILE, scope=SCOPE, log=QUIET).load()) == {
        ContainerID(c.id) for c in made[1:]
    }, "a release drops its record"
    made = made[1:]
    for c in made:  # the runtime reports what it was told
        a = first.assignments[ContainerID(c.id)]
        c.linux.resources.cpu.cpus = str(a.cpus)
        c.linux.resources.cpu.mems = str(a.mems)
    second = pipeline()
    assert second.synchronize([db, web], made) == []
    assert second.state == first.state
    assert pipeline().synchronize([db, web], made) == [], "a second restart moves nothing"


def test_an_update_cannot_carry_annotations() -> None:
    """Why the records live in the state directory although every runtime reports an
    adjusted annotation back (tests/e2e/test_restart_records.py): only a creation can
    set one, and a shared container's cpuset changes with later updates."""
    assert "annotations" in api.ContainerAdjustment.DESCRIPTOR.fields_by_name
    assert "annotations" not in api.ContainerUpdate.DESCRIPTOR.fields_by_name


def test_a_topology_aware_record_must_render_the_report_or_is_not_used() -> None:
    t = topo(packages=2, nodes=2, cores=2, threads=2, memory="2G")
    p = TopologyAwarePolicy(topology=t, config={})
    s = p.initial_state()
    made = [ctr("g", qos=QoSClass.GUARANTEED, milli=2000, cid="g"),
            ctr("b", qos=QoSClass.BURSTABLE, milli=500, cid="b")]  # fmt: skip
    for c in made:
        s = p.allocate(s, c).state
    rendered = p.render(s)
    reports = [with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in made]
    records = records_of(p, s, rendered)
    assert restart(p, reports, records).reason == RESTORED
    b = ContainerID("b")
    other = next(i for i in range(len(s.tree.pools)) if i != s.grants[b].pool)
    for meaning, why in [
        ({**records[b].meaning, "pool": other}, "the restored state differs"),
        ({**records[b].meaning, "pool": 99}, "pool 99"),
        ({**records[b].meaning, "kind": "roomy"}, "roomy"),
        ({**records[b].meaning, "full": "2"}, "field full"),
    ]:
        wrong = {**records, b: dataclasses.replace(records[b], meaning=meaning)}
        d = restart(p, reports, wrong)
        assert "records not used" in d.reason and why in d.reason, d.reason


def test_a_topology_aware_meaning_read_once_counts_for_its_equals_type_for_type() -> None:
    """A restart reads each distinct meaning once (`records.grants_of`: the shared
    containers of a pool record the same one).  Equal must mean of the same types too:
    ``0 == False``, and a record whose flag is a number is not the daemon's."""
    t = topo(packages=1, nodes=1, cores=4, threads=1, memory="2G")
    p = TopologyAwarePolicy(topology=t, config={})
    s = p.initial_state()
    made = [ctr(name, pod=name, qos=QoSClass.BURSTABLE, milli=500, cid=name) for name in "ab"]
    for c in made:
        s = p.allocate(s, c).state
    rendered = p.render(s)
    reports = [with_current(c, rendered[c.id].cpus, rendered[c.id].mems) for c in made]
    records = records_of(p, s, rendered)
    a, b = ContainerID("a"), ContainerID("b")
    assert records[a].meaning == records[b].meaning, "the same placement, the same meaning"
    assert restart(p, reports, records).reason == RESTORED
    assert records[b].meaning["zero_cpu_request"] is False
    number = {**records[b].meaning, "zero_cpu_request": 0}
    wrong = {**records, b: dataclasses.replace(records[b], meaning=number)}
    d = restart(p, reports, wrong)
    assert "records not used" in d.reason and "field zero_cpu_request" in d.reason, d.reason


def test_a_topology_aware_meaning_is_made_again_only_for_another_grant() -> None:
    p = TopologyAwarePolicy(topology=topo(packages=1, nodes=1, cores=4, threads=1), config={})
    s = p.initial_state()
    for name in ("a", "b"):
        s = p.allocate(s, ctr(name, qos=QoSClass.BURSTABLE, milli=500, cid=name)).state
    a = ContainerID("a")
    first = p.record(s, a)
    assert p.record(s, a) is first, "the same grant: the meaning kept"
    moved = s.grants[a]
    s2 = dataclasses.replace(s, grants=s.grants.set(a, dataclasses.replace(moved, pool=1)))
    again = p.record(s2, a)
    assert again is not first and again is not None and again["pool"] == 1
    for n in range(500):  # containers come and go: the memo stays within the live set
        s = p.allocate(s, ctr(f"x{n}", qos=QoSClass.BEST_EFFORT, cid=f"x{n}")).state
        p.record(s, ContainerID(f"x{n}"))
        s = p.release(s, ContainerID(f"x{n}")).state
    assert len(p.meanings._kept) <= 2 * len(s.grants) + p.meanings.SLACK + 1
    assert len(p.meanings._shared) <= 2 * len(s.grants) + p.meanings.SLACK + 1


def test_the_shared_meanings_stay_within_the_live_set() -> None:
    """One container whose grant keeps changing to new meanings does not grow the
    shared meanings without bound (`records.MeaningMemo`)."""
    p = TopologyAwarePolicy(topology=topo(packages=1, nodes=1, cores=4, threads=1), config={})
    s = p.initial_state()
    s = p.allocate(s, ctr("a", qos=QoSClass.BURSTABLE, milli=500, cid="a")).state
    a = ContainerID("a")
    grant = s.grants[a]
    for milli in range(1, 300):
        request = dataclasses.replace(grant.request, shared_milli=milli)
        moved = dataclasses.replace(grant, request=request)
        meaning = p.record(dataclasses.replace(s, grants=s.grants.set(a, moved)), a)
        assert meaning is not None and meaning["shared_milli"] == milli
    assert len(p.meanings._shared) <= 2 * len(s.grants) + p.meanings.SLACK + 1


def test_equal_topology_aware_meanings_are_one_object() -> None:
    """Two containers placed alike hold one meaning (`records.MeaningMemo`), another
    placement its own."""
    p = TopologyAwarePolicy(topology=topo(packages=1, nodes=1, cores=4, threads=1), config={})
    s = p.initial_state()
    for name in ("a", "b", "c"):
        milli = 700 if name == "c" else 500
        s = p.allocate(s, ctr(name, qos=QoSClass.BURSTABLE, milli=milli, cid=name)).state
    a, b, c = (p.record(s, ContainerID(n)) for n in "abc")
    assert a is not None and b is not None and c is not None
    assert a is b, "one meaning for one placement"
    assert c is not a and c["shared_milli"] == 700 and a["shared_milli"] == 500


def test_an_overcommitted_grant_is_restored_as_it_was_granted() -> None:
    """A container that fit nowhere at a rebuild is overcommitted: its grant holds a
    request the policy set apart from what it asks (no whole CPUs, no millicores
    counted).  The record keeps it, so the restored grant is the one the daemon had."""
    t = topo(packages=1, nodes=1, cores=4, threads=1, memory="2G")
    p = TopologyAwarePolicy(topology=t, config={})
    made = [ctr("big", qos=QoSClass.GUARANTEED, milli=8000, cid="big"),
            ctr("b", qos=QoSClass.BURSTABLE, milli=500, cid="b")]  # fmt: skip
    s = p.rebuild([with_current(c, t.online_cpus(), None) for c in made]).state
    big = s.grants[ContainerID("big")]
    assert (big.kind, big.request.full, big.request.shared_milli) == (CPUKind.SHARED, 0, 0)
    assert_restart_exact(p, s, made)


# ---- every installed policy -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(available_policies()))
def test_every_policy_restarts_idle_without_a_move(name: str) -> None:
    """Issue 24's property at its smallest, for each installed policy (those without
    records too, whose restart is their rebuild): containers placed by decisions,
    a release among them, then a restart from the runtime's report with the records
    kept moves nothing, and neither does a second one."""
    t = topo(packages=1, nodes=2, cores=4, threads=2, memory="2G")
    p = load_policy(name, topology=t, config={})
    made = [
        ctr(f"c{i}", pod=f"p{i}", qos=qos, milli=milli, cid=f"c{i}")
        for i, (qos, milli) in enumerate(
            [(QoSClass.GUARANTEED, 2000), (QoSClass.BURSTABLE, 500), (QoSClass.BEST_EFFORT, 0),
             (QoSClass.GUARANTEED, 1000)]
        )
    ]  # fmt: skip
    state, given = p.initial_state(), {}
    for c in made:
        d = p.allocate(state, c)
        state = d.state
        assert d.assignment is not None
        given[c.id] = d.assignment
        given.update({u.container_id: u for u in d.updates})
    d = p.release(state, made[1].id)
    state, live = d.state, [c for c in made if c != made[1]]
    given.update({u.container_id: u for u in d.updates})
    rendered = p.render(state) or {c.id: given[c.id] for c in live}
    reports = [
        with_current(c, rendered[c.id].cpus or None, rendered[c.id].mems or None) for c in live
    ]
    for _ in range(2):
        records = through_the_file(records_of(p, state, rendered))
        d = restart(p, reports, records)
        assert d.updates == (), d.reason
        assert d.reason.startswith(RESTORED) if records else "rebuilt" in d.reason, d.reason
        state = d.state
