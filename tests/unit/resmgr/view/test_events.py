"""Events on the pod: the words of a placement, the fallback hook, coalescing, the bound
and the rate (nri_resmgr.view.events), and the Event object the shell posts."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from nri_resmgr.config import config_from_mapping
from nri_resmgr.kube.client import KubeClient, KubeCredentials, KubeError
from nri_resmgr.kube.pod_events import PodEventPoster, event_object
from nri_resmgr.model import Assignment, ConfigError, ContainerID, CPUKind, QoSClass
from nri_resmgr.policy.static import StaticPolicy
from nri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.view.events import (
    MAX_CONTAINERS_SHOWN,
    MAX_MESSAGE,
    EventQueue,
    EventsConfig,
    EventType,
    PodEvent,
    PodNote,
    PodRef,
    Reason,
    decision_note,
    describe_placement,
    placement_note,
    refusal_note,
)
from tests.support.builders import ctr, small
from tests.support.daemon import MACHINE, STATIC, discovered, resmgr_plugin
from tests.support.pipeline import container, sandbox

POD = PodRef("default", "web", "uid-web")


def config(**keys: Any) -> EventsConfig:
    """An events section with `keys` (by attribute name) set."""
    return EventsConfig.model_validate(keys)


def held(cpus: str, mems: str, kind: CPUKind, pool: str = "") -> Assignment:
    return Assignment(ContainerID("c"), IDSet.parse(cpus), IDSet.parse(mems), kind, pool=pool)


@pytest.mark.parametrize(
    ("assignment", "words"),
    [
        (held("4-5", "1", CPUKind.EXCLUSIVE), "exclusive CPUs 4-5 on NUMA node 1"),
        (
            held("0-3", "0-1", CPUKind.SHARED, "socket #0"),
            "shared CPUs 0-3 on NUMA nodes 0-1 (pool socket #0)",
        ),
        (held("2", "0,2", CPUKind.RESERVED), "reserved CPUs 2 on NUMA nodes 0,2"),
        (held("", "", CPUKind.NONE), "CPUs not pinned"),
        (held("1", "", CPUKind.NONE), "CPUs not pinned"),
    ],
    ids=["exclusive", "shared-in-pool", "reserved", "none", "none-with-cpus"],
)
def test_a_placement_in_words(assignment: Assignment, words: str) -> None:
    assert describe_placement(assignment) == words


def note(pod: PodRef = POD, container: str = "app", message: str = "m", **kw: Any) -> PodNote:
    reason = kw.get("reason", Reason.PLACED)
    kind = EventType.NORMAL if reason is Reason.PLACED else EventType.WARNING
    return PodNote(pod, container, kind, reason, message)


def pod(i: int) -> PodRef:
    return PodRef("default", f"p{i}", f"uid-{i}")


def test_a_committed_decision_is_a_normal_placed_note() -> None:
    c = ctr("app", pod="web", milli=2000)
    policy = StaticPolicy(topology=small(), config={})
    decision = policy.allocate(policy.initial_state(), c)
    n = decision_note(policy, c, decision)
    assert n is not None
    assert (n.type, n.reason, n.container) == (EventType.NORMAL, Reason.PLACED, "app")
    assert n.pod == PodRef("default", "web", "uid-default-web")
    assert decision.assignment is not None
    assert n.message == describe_placement(decision.assignment)
    assert n.message.startswith("exclusive CPUs ")


def test_a_reserved_request_beyond_the_reserved_cpus_is_a_fallback_warning() -> None:
    policy = TopologyAwarePolicy(topology=small(), config={"reservedResources": {"cpu": "1"}})
    state = policy.initial_state()
    fits = ctr("fits", pod="a", ns="kube-system", qos=QoSClass.BURSTABLE, milli=500, limit=0)
    too_big = ctr("big", pod="b", ns="kube-system", qos=QoSClass.BURSTABLE, milli=3000, limit=0)
    decided = policy.allocate(state, fits)
    assert decided.assignment is not None and decided.assignment.kind is CPUKind.RESERVED
    assert policy.fallback(decided.state, fits) == ""
    fell = policy.allocate(decided.state, too_big)
    assert fell.assignment is not None and fell.assignment.kind is CPUKind.SHARED
    n = decision_note(policy, too_big, fell)
    assert n is not None
    assert (n.type, n.reason) == (EventType.WARNING, Reason.FALLBACK)
    assert n.message == (
        f"{describe_placement(fell.assignment)}: asked for reserved CPUs, placed on shared "
        "CPUs (reserved capacity)"
    )


def test_a_shared_request_placed_shared_is_no_fallback() -> None:
    policy = TopologyAwarePolicy(topology=small(), config={"reservedResources": {"cpu": "1"}})
    c = ctr("app", qos=QoSClass.BURSTABLE, milli=500, limit=1000)
    decided = policy.allocate(policy.initial_state(), c)
    assert policy.fallback(decided.state, c) == ""
    n = decision_note(policy, c, decided)
    assert n is not None and n.reason is Reason.PLACED


def test_no_assignment_is_no_note_and_a_refusal_is_a_warning() -> None:
    c = ctr("app")
    assert placement_note(c, None, fallback="") is None
    r = refusal_note(POD, "app", "no pool can fit 20 CPUs")
    assert (r.type, r.reason, r.message) == (
        EventType.WARNING,
        Reason.REFUSED,
        "no pool can fit 20 CPUs",
    )


def test_notes_about_one_pod_coalesce_into_one_event_per_reason() -> None:
    q = EventQueue(config(coalesce_seconds=0))
    assert q.offer(note(container="a", message="exclusive CPUs 1"), now=0)
    assert q.offer(note(container="b", message="shared CPUs 2-3"), now=0.1)
    assert q.offer(note(container="a", message="exclusive CPUs 4"), now=0.2)
    assert q.offer(note(container="a", message="no room", reason=Reason.REFUSED), now=0.3)
    events = q.take(now=1)
    assert [(e.reason, e.count, e.message) for e in events] == [
        (Reason.PLACED, 3, "container b: shared CPUs 2-3; container a: exclusive CPUs 4"),
        (Reason.REFUSED, 1, "container a: no room"),
    ]
    assert (events[0].first, events[0].last) == (0, 0.2)
    assert events[1].type is EventType.WARNING
    assert q.take(now=2) == [] and len(q) == 0


def test_an_event_waits_coalesce_seconds_for_more_notes() -> None:
    q = EventQueue(config(coalesce_seconds=1.0))
    q.offer(note(), now=10)
    assert q.next_due() == 11
    assert q.take(now=10.5) == []
    q.offer(note(container="b"), now=10.9)
    (event,) = q.take(now=11)
    assert event.count == 2
    assert q.next_due() is None


def test_the_rate_and_burst_bound_what_is_taken_and_the_rest_keeps_coalescing() -> None:
    q = EventQueue(config(rate=1.0, burst=2, coalesce_seconds=0))
    for i in range(5):
        q.offer(note(pod(i)), now=0)
    assert [e.pod for e in q.take(now=0)] == [pod(0), pod(1)]
    assert q.take(now=0.5) == []
    q.offer(note(pod(2), container="late"), now=0.6)
    (third,) = q.take(now=1.0)
    assert (third.pod, third.count) == (pod(2), 2)
    assert [e.pod for e in q.take(now=10)] == [pod(3), pod(4)]  # the bucket holds 2


def test_the_queue_is_bounded_and_counts_what_it_drops() -> None:
    q = EventQueue(config(max_pending=3, coalesce_seconds=0))
    for i in range(3):
        assert q.offer(note(pod(i)), now=0)
    assert not q.offer(note(pod(3)), now=0)
    assert q.dropped == 1 and len(q) == 3
    assert q.offer(note(pod(1), container="b"), now=0)  # a waiting pod still coalesces
    assert len(q) == 3


def test_turned_off_nothing_is_kept() -> None:
    q = EventQueue(EventsConfig(enabled=False))
    assert not q.offer(note(), now=0)
    assert len(q) == 0 and q.dropped == 0
    on = EventQueue(config(coalesce_seconds=0))
    on.offer(note(), now=0)
    on.configure(EventsConfig(enabled=False))
    assert len(on) == 0 and on.take(now=5) == []


def test_a_message_is_bounded_in_containers_and_characters() -> None:
    q = EventQueue(config(coalesce_seconds=0))
    for i in range(MAX_CONTAINERS_SHOWN + 4):
        q.offer(note(container=f"c{i}", message="x" * 10), now=0)
    (e,) = q.take(now=1)
    assert e.count == MAX_CONTAINERS_SHOWN + 4
    assert "container c3:" not in e.message and "container c4:" in e.message
    q.offer(note(message="y" * 5000), now=2)
    (long,) = q.take(now=3)
    assert len(long.message) <= MAX_MESSAGE
    assert long.message.endswith(f"... ({len('container app: ') + 5000 - MAX_MESSAGE + 20} more)")


def test_the_event_object_names_the_pod_reason_type_and_count() -> None:
    event = PodEvent(
        POD, EventType.WARNING, Reason.REFUSED, "container a: no room", 3, first=1, last=2
    )
    t0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    obj = event_object(event, node="n1", first=t0, last=t0 + datetime.timedelta(seconds=7))
    assert obj["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web",
        "namespace": "default",
        "uid": "uid-web",
    }
    assert obj["metadata"]["namespace"] == "default"
    assert obj["metadata"]["name"].startswith("web.")
    assert (obj["reason"], obj["type"], obj["message"], obj["count"]) == (
        "PlacementRefused",
        "Warning",
        "container a: no room",
        3,
    )
    assert (obj["firstTimestamp"], obj["lastTimestamp"]) == (
        "2026-01-02T03:04:05Z",
        "2026-01-02T03:04:12Z",
    )
    assert obj["source"] == {"component": "nri-resmgr", "host": "n1"}


class Recorder(KubeClient):
    """A client that records its requests; a pod named ``refused`` gets a 403."""

    def __init__(self) -> None:
        super().__init__(KubeCredentials(server="http://127.0.0.1:1"))
        self.posted: list[tuple[str, dict[str, Any]]] = []

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        body = kw["body"]
        if body["involvedObject"]["name"] == "refused":
            raise KubeError(403, "forbidden")
        self.posted.append((path, body))
        return {}


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, message: str, **kw: Any) -> None:
        self.lines.append((message, kw))


def test_the_poster_posts_what_is_due_takes_new_configuration_and_logs_refusals() -> None:
    now = [100.0]
    queue = EventQueue(EventsConfig(enabled=False))
    configs = [config(coalesce_seconds=0)]
    client, log = Recorder(), Log()
    poster = PodEventPoster(
        client, queue, node="n1", config=lambda: configs[0], log=log, clock=lambda: now[0]
    )
    assert asyncio.run(poster.round()) == 0 and queue.config == configs[0]
    queue.offer(note(message="exclusive CPUs 4-5 on NUMA node 1"), now=now[0])
    queue.offer(note(PodRef("ns2", "refused", "u2")), now=now[0])
    assert asyncio.run(poster.round()) == 1
    ((path, body),) = client.posted
    assert path == "/api/v1/namespaces/default/events"
    assert body["message"] == "container app: exclusive CPUs 4-5 on NUMA node 1"
    assert (poster.posted, poster.failed) == (1, 1)
    assert log.lines[0][1]["pod"] == "ns2/refused"
    configs[0] = EventsConfig(enabled=False)
    asyncio.run(poster.round())
    assert not queue.offer(note(), now=now[0])


def test_a_bad_events_section_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"events\.rate: expected greater than 0, found 0"):
        config_from_mapping({"events": {"rate": 0}})
    with pytest.raises(ConfigError, match=r"events\.maxPending: expected greater than or equal"):
        config_from_mapping({"events": {"maxPending": 0}})
    assert config_from_mapping({"events": {"coalesceSeconds": 2}}).events.coalesce_seconds == 2


def test_the_daemon_makes_a_note_only_while_events_are_on() -> None:
    """The daemon's decision hook builds a pod's note only for a queue that takes it:
    off (the default until the Kubernetes side posts events) nothing is queued, on the
    creation's note is."""
    plugin = resmgr_plugin(STATIC, discovered(MACHINE))
    pod = sandbox("db")
    plugin.pipeline.run_pod(pod)
    plugin.pipeline.create(pod, container(pod, "a"))
    assert len(plugin.pod_events) == 0 and len(plugin.decisions) == 1
    plugin.pod_events.configure(config(enabled=True))
    plugin.pipeline.create(pod, container(pod, "b"))
    assert len(plugin.pod_events) == 1 and len(plugin.decisions) == 2


def test_the_daemons_note_waits_for_the_reply_and_tells_the_decision() -> None:
    """issue 25 (create-1000): in the running daemon the record and the pod's note are
    made after the step that sends the reply (`ResmgrPlugin._after_reply`), with the
    policy that decided, not before it."""
    plugin = resmgr_plugin(STATIC, discovered(MACHINE))
    plugin.pod_events.configure(config(enabled=True))
    pod = sandbox("db")
    plugin.pipeline.run_pod(pod)

    async def create() -> tuple[int, int]:
        await plugin.create_container(pod, container(pod, "a"))
        before = len(plugin.decisions) + len(plugin.pod_events)
        await asyncio.sleep(0)  # the turn that sent the reply ends
        return before, len(plugin.pod_events)

    assert asyncio.run(create()) == (0, 1)
    note = plugin.decisions.get(ContainerID("db-a"))
    assert note is not None and note.event == "create" and note.cpus
