"""Subscription: derived from overridden hooks, narrowed by configure, clipped by version."""

from __future__ import annotations

import pytest

from nri_api import api
from nri_api.events import MASK_BEFORE_V0_10, MASK_V0_10, Event
from nri_api.stub import HOOK_EVENTS, Plugin, implemented_events, subscription_mask


class Creator(Plugin):
    def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        return None


class Everything(Plugin):
    pass


for _hook in HOOK_EVENTS:
    setattr(Everything, _hook, lambda self, *args: None)


class AsyncStarter(Plugin):
    async def start_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        return None

    async def validate_container_adjustment(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> None:
        return None


class Inherited(Creator):
    def configure(self, config: str, runtime: object) -> None:
        return None


def test_each_hook_subscribes_its_event() -> None:
    for hook, event in HOOK_EVENTS.items():
        cls = type(f"Only_{hook}", (Plugin,), {hook: lambda self, *args: None})
        assert implemented_events(cls) == event.bit, hook


def test_hook_table_covers_every_event() -> None:
    assert set(HOOK_EVENTS.values()) == set(Event) - {Event.UNKNOWN}


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        pytest.param(Creator, Event.CREATE_CONTAINER.bit, id="create"),
        pytest.param(Inherited, Event.CREATE_CONTAINER.bit, id="inherited-hook"),
        pytest.param(
            AsyncStarter,
            Event.START_CONTAINER.bit | Event.VALIDATE_CONTAINER_ADJUSTMENT.bit,
            id="async-hooks",
        ),
        pytest.param(Everything, MASK_V0_10, id="all"),
    ],
)
def test_implemented_events(cls: type[Plugin], expected: int) -> None:
    assert implemented_events(cls) == expected


def test_plugin_without_event_hooks_is_rejected() -> None:
    class Nothing(Plugin):
        def configure(self, config: str, runtime: object) -> None:
            return None

    with pytest.raises(TypeError, match="at least one event hook"):
        Nothing(name="x", idx="10", environ={})


V08 = MASK_BEFORE_V0_10
V10 = MASK_V0_10
CREATE = Event.CREATE_CONTAINER.bit
START = Event.START_CONTAINER.bit
VALIDATE = Event.VALIDATE_CONTAINER_ADJUSTMENT.bit
UPDATE_POD = Event.UPDATE_POD_SANDBOX.bit


@pytest.mark.parametrize(
    ("implemented", "requested", "valid", "mask", "dropped"),
    [
        pytest.param(CREATE | START, None, V10, CREATE | START, 0, id="default-all-implemented"),
        pytest.param(CREATE | START, 0, V10, CREATE | START, 0, id="zero-means-implemented"),
        pytest.param(CREATE | START, START, V10, START, 0, id="narrowed"),
        pytest.param(CREATE | VALIDATE, None, V08, CREATE, VALIDATE, id="v0.8-drops-validate"),
        pytest.param(V10, None, V08, V08, V10 & ~V08, id="v0.8-drops-12-14"),
        pytest.param(CREATE | VALIDATE, None, V10, CREATE | VALIDATE, 0, id="v0.10-keeps"),
        pytest.param(
            CREATE | UPDATE_POD, UPDATE_POD | CREATE, V08, CREATE, UPDATE_POD, id="requested-clip"
        ),
    ],
)
def test_subscription_mask(
    implemented: int, requested: int | None, valid: int, mask: int, dropped: int
) -> None:
    assert subscription_mask(implemented=implemented, requested=requested, valid=valid) == (
        mask,
        dropped,
    )


def test_subscription_beyond_implemented_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"START_CONTAINER.*no hook.*CREATE_CONTAINER"):
        subscription_mask(implemented=CREATE, requested=CREATE | START, valid=V10)


def test_subscription_with_unknown_bits_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown bits 0x100000"):
        subscription_mask(implemented=CREATE, requested=CREATE | 1 << 20, valid=V10)


def test_subscription_never_zero() -> None:
    # 0 would mean "everything" to the runtime: a validator-only plugin on v0.8 must fail.
    with pytest.raises(ValueError, match="accepts none"):
        subscription_mask(implemented=VALIDATE, requested=None, valid=V08)


@pytest.mark.parametrize("valid", [V08, V10], ids=["v0.8", "v0.10"])
@pytest.mark.parametrize("requested", [None, V10, CREATE | VALIDATE], ids=["all", "v10", "pair"])
def test_mask_never_exceeds_valid(valid: int, requested: int | None) -> None:
    mask, dropped = subscription_mask(implemented=V10, requested=requested, valid=valid)
    assert mask & ~valid == 0
    assert mask | dropped == (requested or V10)
    assert mask & dropped == 0
