"""The one RPC table: it matches the Plugin service of the schema, and is checked at import."""

from __future__ import annotations

import inspect

import pytest

from nri_api import rpc
from nri_api._pb import api_pb2
from nri_api.dispatch import Hooks
from nri_api.events import Event
from nri_api.rpc import PLUGIN_RPCS, RPC, Shape

SERVICE = api_pb2.DESCRIPTOR.services_by_name["Plugin"]


def test_the_table_has_exactly_the_rpcs_of_the_plugin_service() -> None:
    assert [r.method for r in PLUGIN_RPCS] == [m.name for m in SERVICE.methods]


@pytest.mark.parametrize("method", list(SERVICE.methods), ids=lambda m: m.name)
def test_request_and_response_types_are_the_schema_s(method: object) -> None:
    record = rpc.BY_METHOD[method.name]  # type: ignore[attr-defined]
    assert record.request.DESCRIPTOR.full_name == method.input_type.full_name  # type: ignore[attr-defined]
    assert record.response.DESCRIPTOR.full_name == method.output_type.full_name  # type: ignore[attr-defined]


def test_service_name_is_the_one_the_stub_serves() -> None:
    from nri_api import api

    assert SERVICE.full_name == api.PLUGIN_SERVICE


def test_every_event_has_one_rpc_and_every_hook_exists() -> None:
    assert set(rpc.EVENT_RPCS) == set(Event) - {Event.UNKNOWN}
    for record in PLUGIN_RPCS:
        if record.hook is not None:
            assert inspect.isfunction(getattr(Hooks, record.hook)), record.hook


def test_derived_mappings() -> None:
    assert list(rpc.HOOK_EVENTS.values()) == sorted(rpc.HOOK_EVENTS.values())
    assert rpc.HOOK_EVENTS["create_container"] is Event.CREATE_CONTAINER
    assert rpc.EVENT_HOOKS[Event.VALIDATE_CONTAINER_ADJUSTMENT] == "validate_container_adjustment"
    assert {
        Event.RUN_POD_SANDBOX,
        Event.STOP_POD_SANDBOX,
        Event.REMOVE_POD_SANDBOX,
        Event.POST_UPDATE_POD_SANDBOX,
    } == rpc.POD_EVENTS
    assert {
        Event.POST_CREATE_CONTAINER,
        Event.START_CONTAINER,
        Event.POST_START_CONTAINER,
        Event.POST_UPDATE_CONTAINER,
        Event.REMOVE_CONTAINER,
    } == rpc.CONTAINER_EVENTS
    assert rpc.SIMPLE_EVENTS == rpc.POD_EVENTS | rpc.CONTAINER_EVENTS
    # the simple events are exactly those StateChange can carry with an empty reply
    for event in rpc.SIMPLE_EVENTS:
        assert rpc.EVENT_RPCS[event].response.DESCRIPTOR.fields == []
    with pytest.raises(TypeError):
        rpc.HOOK_EVENTS["x"] = Event.UNKNOWN  # type: ignore[index]


def _record(method: str, shape: Shape, hook: str | None, event: Event | None) -> RPC:
    return RPC(method, api_pb2.Empty, api_pb2.Empty, shape, hook, event)


@pytest.mark.parametrize(
    ("records", "found"),
    [
        (
            [
                _record("A", Shape.POD_EVENT, "a", Event.RUN_POD_SANDBOX),
                _record("A", Shape.POD_EVENT, "b", Event.STOP_POD_SANDBOX),
            ],
            "unique methods, found ['A'] twice",
        ),
        (
            [
                _record("A", Shape.POD_EVENT, "a", Event.RUN_POD_SANDBOX),
                _record("B", Shape.POD_EVENT, "b", Event.RUN_POD_SANDBOX),
            ],
            "unique events",
        ),
        (
            [
                _record("A", Shape.POD_EVENT, "a", Event.RUN_POD_SANDBOX),
                _record("B", Shape.CONTAINER_EVENT, "a", Event.START_CONTAINER),
            ],
            "unique hooks, found ['a'] twice",
        ),
        ([_record("A", Shape.LIFECYCLE, "a", Event.RUN_POD_SANDBOX)], "RPC A: expected an event"),
        ([_record("A", Shape.REPLY_EVENT, "a", None)], "RPC A: expected an event"),
    ],
    ids=["method", "event", "hook", "lifecycle-with-event", "event-without-event"],
)
def test_check_table_rejects_inconsistent_records(records: list[RPC], found: str) -> None:
    with pytest.raises(ValueError, match=found.replace("[", r"\[").replace("]", r"\]")):
        rpc.check_table(records)


def test_a_record_whose_shape_needs_a_handler_of_its_own_fails_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import nri_api.dispatch
    from nri_api import Plugin

    class Creator(Plugin):
        def create_container(self, pod: object, container: object) -> None:
            return None

    Creator(name="t", idx="10", environ={})  # the real table: every handler is there
    extra = RPC("Frobnicate", api_pb2.Empty, api_pb2.Empty, Shape.LIFECYCLE, "frobnicate")
    monkeypatch.setattr(nri_api.dispatch, "PLUGIN_RPCS", (*PLUGIN_RPCS, extra))
    with pytest.raises(RuntimeError, match=r"expected a handler for each of .*'Frobnicate'"):
        Creator(name="t", idx="10", environ={})
