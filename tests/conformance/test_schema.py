"""Our api.proto describes the same wire schema as the real NRI v0.12.2 Go library.

The Go program in tests/conformance/schema/ links github.com/containerd/nri v0.12.2 and
prints the FileDescriptorProto compiled into it. We flatten both descriptors (the real
one and `nri_api._pb.api_pb2.DESCRIPTOR`) into "facts" (one per message, field, enum,
enum value, service and method, with everything that matters on the wire or for
naming) and report every difference at once. Comments, declaration order, file name
and options such as go_package are not part of the schema and are not compared; the
map-entry flag of nested map types is.

The unit tests at the bottom prove the comparison can fail, without Go.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, json_format

from nri_api._pb import api_pb2
from tests.support.requirements import REPO, require_go

SCHEMA_MODULE = Path(__file__).resolve().parent / "schema"
PACKAGE = "nri.pkg.api.v1alpha1"

FileProto = descriptor_pb2.FileDescriptorProto
FieldProto = descriptor_pb2.FieldDescriptorProto


def _type_name(name: str, package: str) -> str:
    prefix = f".{package}."
    return name[len(prefix) :] if name.startswith(prefix) else name


def _message_facts(
    msg: descriptor_pb2.DescriptorProto, scope: str, package: str
) -> Iterator[tuple[str, str]]:
    name = f"{scope}{msg.name}"
    yield f"message {name}", "map_entry" if msg.options.map_entry else "message"
    oneofs = [o.name for o in msg.oneof_decl]
    for f in msg.field:
        oneof = oneofs[f.oneof_index] if f.HasField("oneof_index") else "-"
        yield (
            f"field {name}.{f.name}",
            " ".join(
                [
                    f"number={f.number}",
                    f"type={FieldProto.Type.Name(f.type)}",
                    f"label={FieldProto.Label.Name(f.label)}",
                    f"type_name={_type_name(f.type_name, package) or '-'}",
                    f"oneof={oneof}",
                    f"proto3_optional={f.proto3_optional}",
                ]
            ),
        )
    for e in msg.enum_type:
        yield from _enum_facts(e, f"{name}.")
    for nested in msg.nested_type:
        yield from _message_facts(nested, f"{name}.", package)


def _enum_facts(enum: descriptor_pb2.EnumDescriptorProto, scope: str) -> Iterator[tuple[str, str]]:
    name = f"{scope}{enum.name}"
    yield f"enum {name}", "enum"
    for v in enum.value:
        yield f"enum value {name}.{v.name}", f"number={v.number}"


def schema_facts(fdp: FileProto) -> dict[str, str]:
    """Flatten a file descriptor into {subject: description} for comparison."""
    facts: dict[str, str] = {
        "file package": fdp.package,
        "file syntax": fdp.syntax or "proto2",
        "file dependencies": ",".join(sorted(fdp.dependency)) or "-",
    }
    items: list[tuple[str, str]] = []
    for m in fdp.message_type:
        items.extend(_message_facts(m, "", fdp.package))
    for e in fdp.enum_type:
        items.extend(_enum_facts(e, ""))
    for s in fdp.service:
        items.append((f"service {s.name}", "service"))
        for meth in s.method:
            items.append(
                (
                    f"method {s.name}.{meth.name}",
                    f"{_type_name(meth.input_type, fdp.package)} -> "
                    f"{_type_name(meth.output_type, fdp.package)}"
                    f" client_streaming={meth.client_streaming}"
                    f" server_streaming={meth.server_streaming}",
                )
            )
    for subject, description in items:
        if subject in facts:
            raise ValueError(f"descriptor {fdp.name}: expected unique {subject}, found two")
        facts[subject] = description
    return facts


def schema_differences(real: FileProto, ours: FileProto) -> list[str]:
    """Every way `ours` differs from `real`, one line each; empty if they agree."""
    want, got = schema_facts(real), schema_facts(ours)
    problems = []
    for subject in sorted(want.keys() | got.keys()):
        if subject not in got:
            problems.append(f"missing in ours: {subject} ({want[subject]})")
        elif subject not in want:
            problems.append(f"not in NRI v0.12.2: {subject} ({got[subject]})")
        elif want[subject] != got[subject]:
            problems.append(f"{subject}: NRI has {want[subject]!r}, ours has {got[subject]!r}")
    return problems


def our_descriptor() -> FileProto:
    fdp = FileProto()
    api_pb2.DESCRIPTOR.CopyToProto(fdp)
    return fdp


@pytest.fixture(scope="module")
def real_descriptor() -> FileProto:
    go = require_go()
    out_dir = REPO / ".cache" / "conformance"
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / "nri-schema"
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-mod=readonly")
    build = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=SCHEMA_MODULE,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert build.returncode == 0, f"go build of {SCHEMA_MODULE} failed:\n{build.stderr}"
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, f"{binary} failed:\n{run.stderr}"
    return json_format.Parse(run.stdout, FileProto())


@pytest.mark.conformance
def test_real_descriptor_is_the_nri_api(real_descriptor: FileProto) -> None:
    # Guard against comparing with something trivially empty.
    assert real_descriptor.package == PACKAGE
    assert len(real_descriptor.message_type) > 80
    assert [s.name for s in real_descriptor.service] == ["Runtime", "Plugin", "HostFunctions"]


@pytest.mark.conformance
def test_schema_matches_nri_v0_12_2(real_descriptor: FileProto) -> None:
    problems = schema_differences(real_descriptor, our_descriptor())
    assert not problems, (
        f"nri_api/_pb/api.proto differs from NRI v0.12.2 in {len(problems)} ways:\n  "
        + "\n  ".join(problems)
    )


# --- the comparison itself (no Go needed) -------------------------------------------


def _find_message(fdp: FileProto, name: str) -> descriptor_pb2.DescriptorProto:
    for m in fdp.message_type:
        if m.name == name:
            return m
    raise AssertionError(f"no message {name}")


def _find_field(msg: descriptor_pb2.DescriptorProto, name: str) -> FieldProto:
    for f in msg.field:
        if f.name == name:
            return f
    raise AssertionError(f"no field {name} in {msg.name}")


def test_identical_descriptors_have_no_differences() -> None:
    assert schema_differences(our_descriptor(), our_descriptor()) == []


def test_facts_cover_nested_map_entries_and_enums() -> None:
    facts = schema_facts(our_descriptor())
    assert facts["message PodSandbox.LabelsEntry"] == "map_entry"
    assert facts["field FieldOwners.CompoundEntry.value"].startswith("number=2 type=TYPE_MESSAGE")
    assert "type_name=CompoundFieldOwners" in facts["field FieldOwners.CompoundEntry.value"]
    assert facts["enum value LogRequest.Level.LEVEL_ERROR"] == "number=4"
    assert facts["method Plugin.Shutdown"].startswith("Empty -> Empty")
    assert facts["field ConfigureResponse.events"].startswith("number=2 type=TYPE_INT32")


def test_every_kind_of_alteration_is_reported_together() -> None:
    real = our_descriptor()
    altered = our_descriptor()

    container = _find_message(altered, "Container")
    _find_field(container, "CDI_devices").name = "cdi_devices"  # renamed field
    _find_field(container, "pid").number = 99  # renumbered field
    _find_field(container, "exit_code").type = FieldProto.TYPE_INT64  # retyped field
    _find_field(container, "args").label = FieldProto.LABEL_OPTIONAL  # relabelled
    hook = _find_message(altered, "Hook")
    _find_field(hook, "timeout").type_name = f".{PACKAGE}.OptionalInt32"  # wrong wrapper
    labels_entry = next(n for n in container.nested_type if n.name == "LabelsEntry")
    labels_entry.options.map_entry = False  # map became a repeated message
    altered.message_type.remove(_find_message(altered, "Image"))  # dropped message
    altered.message_type.add(name="Extra")  # invented message
    event = next(e for e in altered.enum_type if e.name == "Event")
    event.value[-1].number = 12  # LAST back to its pre-v0.10 value
    plugin = next(s for s in altered.service if s.name == "Plugin")
    plugin.method[0].output_type = f".{PACKAGE}.Empty"  # wrong reply type

    problems = schema_differences(real, altered)
    text = "\n".join(problems)
    for expected in [
        "missing in ours: field Container.CDI_devices",
        "not in NRI v0.12.2: field Container.cdi_devices",
        "field Container.pid: NRI has 'number=12",
        "field Container.exit_code:",
        "field Container.args:",
        "field Hook.timeout:",
        "message Container.LabelsEntry: NRI has 'map_entry', ours has 'message'",
        "missing in ours: message Image",
        "missing in ours: field Image.digest",
        "not in NRI v0.12.2: message Extra",
        "enum value Event.LAST: NRI has 'number=15', ours has 'number=12'",
        "method Plugin.Configure: NRI has 'ConfigureRequest -> ConfigureResponse",
    ]:
        assert expected in text, f"{expected!r} not reported in:\n{text}"
    assert "TYPE_INT64" in next(p for p in problems if p.startswith("field Container.exit_code"))


def test_package_change_is_reported() -> None:
    altered = our_descriptor()
    altered.package = "nri.pkg.api.v1beta1"
    problems = schema_differences(our_descriptor(), altered)
    assert any(p.startswith("file package:") for p in problems)
