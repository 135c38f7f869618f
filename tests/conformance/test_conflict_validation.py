"""Container adjustment validation (NRI v0.10+) with a Python validator plugin.

After every plugin's CreateContainer the runtime asks each validator with the
pristine container, the merged adjustment, the owners of each adjusted field and
the plugins consulted; a rejection fails the creation with
`validator "<NN-name>" rejected container adjustment, reason: <reason>`.
Runtimes before v0.10 have no validation: the plugin's stub drops that
subscription and the same adjustments pass.
"""

from __future__ import annotations

import json

import pytest

from tests.conformance.harness import GoRuntime, RuntimeCallError, prune_empty, read_jsonl
from tests.conformance.harness_build import version_key
from tests.conformance.harness_pods import make_container, make_pod
from tests.conformance.plugins import PLUGINS, attach_recorder
from tests.conformance.plugins.recorder import CPUSET_ANNOTATION
from tests.conformance.plugins.validator import reject_reason

pytestmark = pytest.mark.conformance

VALIDATOR = PLUGINS / "validator.py"


def test_python_validator(runtime: GoRuntime, mode: str) -> None:
    rec = attach_recorder(runtime, mode=mode)
    record = runtime.dir / "90-validator.jsonl"
    settings = {"record": str(record), "reject_cpus": "0"}
    runtime.start_external(
        VALIDATOR, idx="90", name="validator", args=["--settings", json.dumps(settings)]
    )
    runtime.wait_synced()
    pod = make_pod(name="web-0")
    pinned = make_container(
        pod, name="pinned", annotations={CPUSET_ANNOTATION.format(name="pinned"): "0"}
    )
    fine = make_container(
        pod, name="fine", annotations={CPUSET_ANNOTATION.format(name="fine"): "1-2"}
    )
    validates = version_key(runtime.version) >= (0, 10, 0)

    if validates:
        with pytest.raises(RuntimeCallError) as err:
            runtime.create_container(pod, pinned)
        assert err.value.message == (
            f'validator "90-validator" rejected container adjustment, reason: {reject_reason("0")}'
        )
    else:
        created = runtime.create_container(pod, pinned)
        assert prune_empty(created)["adjust"]["linux"] == {"resources": {"cpu": {"cpus": "0"}}}
    created = runtime.create_container(pod, fine)
    assert prune_empty(created)["adjust"]["linux"] == {"resources": {"cpu": {"cpus": "1-2"}}}

    seen = [r for r in read_jsonl(record) if r["event"] != "CONFIGURE"]
    expected = []
    for ctr, cpus in ((pinned, "0"), (fine, "1-2")):
        expected.append({"event": "CREATE_CONTAINER", "container": ctr["id"]})
        if validates:
            expected.append(
                {
                    "event": "VALIDATE_CONTAINER_ADJUSTMENT",
                    "container": ctr["id"],
                    "cpus": cpus,
                    "cpus_owner": "10-recorder",
                    "plugins": ["10-recorder", "90-validator"],
                }
            )
    assert [{k: r[k] for k in e} for r, e in zip(seen, expected, strict=True)] == expected
    assert len(rec.of("CREATE_CONTAINER")) == 2
