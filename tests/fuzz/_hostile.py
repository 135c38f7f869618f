"""Seeded generators of hostile input shared by the fuzz tests.

Everything here draws from a `random.Random` given by the caller, so a case is reproduced
by its seed and index alone.  `hostile_*` give values a pod author or a broken runtime
could send; `mutate` damages an encoded message the ways a wire does (and worse).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Final

from nri_api import api

#: cases per CI run and the seed; override for a long run (docs/fuzzing.md)
ENV_CASES: Final = "NRI_RESMGR_FUZZ_CASES"
ENV_SEED: Final = "NRI_RESMGR_FUZZ_SEED"
DEFAULT_SEED: Final = 20261123


def fuzz_cases(default: int) -> int:
    return int(os.environ.get(ENV_CASES, "") or default)


def fuzz_seed() -> int:
    return int(os.environ.get(ENV_SEED, "") or DEFAULT_SEED)


DOMAIN: Final = "resource-policy.nri.io"
#: every annotation key the daemon reads, in the three forms `annotation()` resolves
ANNOTATION_KEYS: Final = (
    "noderesource.dev/resources",
    "node.koordinator.sh/resctrl",
    f"init-containers.{DOMAIN}",
    f"prefer-isolated-cpus.{DOMAIN}",
    f"prefer-shared-cpus.{DOMAIN}",
    f"prefer-reserved-cpus.{DOMAIN}",
    f"hide-hyperthreads.{DOMAIN}",
    f"cpu.preserve.{DOMAIN}",
    f"memory.preserve.{DOMAIN}",
    f"memory-type.{DOMAIN}",
    f"rdtclass.{DOMAIN}",
    f"blockioclass.{DOMAIN}",
    f"scheduling-class.{DOMAIN}",
    f"topologyhints.{DOMAIN}",
    f"strict.topologyhints.{DOMAIN}",
    f"test.topologyhints.{DOMAIN}",
    f"pick-resources-by-hints.{DOMAIN}",
)


def _nested(rng: random.Random) -> str:
    depth = rng.choice([31, 32, 33, 100, 999, 1000, 5000, 50_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}"), ('{"llc":', "}")])
    tail = closer * depth if rng.random() < 0.8 else ""  # unbalanced sometimes
    return opener * depth + ("1" if opener != "[" else "") + tail


def _char(rng: random.Random) -> str:
    """Any character protobuf can carry (UTF-8: no surrogates)."""
    code = rng.randint(1, 0x2FFFF)
    return chr(code) if not 0xD800 <= code <= 0xDFFF else "\ufffd"


def hostile_text(rng: random.Random) -> str:
    """A string value a pod author could put in an annotation."""
    makers: list[Callable[[], str]] = [
        lambda: _nested(rng),
        lambda: "x" * rng.choice([255, 64 * 1024, 300 * 1024]),
        lambda: '{"initContainers": [' + ",".join(['"i"'] * rng.randint(1, 50_000)) + "]}",
        lambda: (
            '{"initContainers": '
            + rng.choice(
                ['{"a": {}}', "null", "7", '"x"', "[[]]", '[{"name": 7}]', '[{"name": null}]']
            )
            + "}"
        ),
        lambda: (
            '{"llc": {"schemata": {"range": [' + f"{rng.randint(-5, 200)}, "
            f"{rng.randint(-5, 200)}" + "]}}, "
            '"mb": {"schemata": {"percent": '
            + rng.choice(["1e400", "-0", "NaN", "50", "true"])
            + "}}}"
        ),
        lambda: '{"LLC": {"SchemataPerCache": [{"CacheID": 1e99, "Range": [0, 5]}]}}',
        lambda: "1" * rng.choice([4301, 10_000]),
        lambda: rng.choice(
            [
                "true",
                "false",
                "True",
                "yes",
                "1",
                "0",
                "",
                " ",
                "null",
                "\x00",
                "\ufffd",
                "\u0663",
                "../../etc",
                "a/b",
                "hbm,dram,pmem",
                "hbmx",
                "dram," * 1000,
                "Guaranteed",
                "BestEffort",
                "-1",
                "1e400",
                "NaN",
                "Infinity",
                "[]",
                "{}",
                '"quoted"',
            ]
        ),
        lambda: "".join(_char(rng) for _ in range(rng.randint(1, 64))),
        lambda: ",".join(f" name{i} " for i in range(rng.randint(1, 5000))),
    ]
    return rng.choice(makers)()


def hostile_cpuset(rng: random.Random) -> str:
    """A cpuset string a broken or hostile runtime could report."""
    return rng.choice(
        [
            "0-9999999",
            "0-4294967295",
            "18446744073709551616",
            "9" * 5000,
            "8191",
            "8192",
            ",".join(["0-8191"] * rng.randint(1, 3000)),
            "1," * rng.randint(1, 20_000),
            "-1",
            "1-",
            "-",
            ",",
            "3-1",
            "0x10",
            "1e3",
            "\u0663",
            "\u0660-\u0669",
            " 1 ",
            "\t0-3\n",
            "0-3,,5",
            "",
            "0--3",
            "+1",
            "1_000",
            "0-63",
            "0-7",
            "64-127",
            "\x00",
        ]
    )


def hostile_int(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 3, -1, -(2**63), 2**63 - 1, 2**31, 1000, 10**12])


def _uint(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 3, 2**32 - 1, 2**63, 2**64 - 1, 1024, 102_400])


def hostile_resources(rng: random.Random) -> api.LinuxResources:
    r = api.LinuxResources()
    if rng.random() < 0.8:
        r.cpu.shares.value = _uint(rng)
        r.cpu.shares.SetInParent()
    if rng.random() < 0.7:
        r.cpu.quota.value = hostile_int(rng)
        r.cpu.quota.SetInParent()
    if rng.random() < 0.7:
        r.cpu.period.value = _uint(rng)
        r.cpu.period.SetInParent()
    if rng.random() < 0.7:
        r.memory.limit.value = hostile_int(rng)
        r.memory.limit.SetInParent()
    roll = rng.random()
    if roll < 0.3:
        r.cpu.cpus = hostile_cpuset(rng)
    elif roll < 0.6:
        r.cpu.cpus = rng.choice(["0-7", "1,5", "0-3", "7", "0-63"])
    roll = rng.random()
    if roll < 0.2:
        r.cpu.mems = hostile_cpuset(rng)
    elif roll < 0.5:
        r.cpu.mems = rng.choice(["0", "0-1", "1"])
    return r


def hostile_annotations(rng: random.Random, container: str) -> dict[str, str]:
    """1-3 annotations; the JSON ones (read as pod annotations) are drawn more often."""
    out: dict[str, str] = {}
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.4:
            key = rng.choice(ANNOTATION_KEYS[:2])
            out[key] = _nested(rng) if rng.random() < 0.4 else hostile_text(rng)
            continue
        key = rng.choice(ANNOTATION_KEYS)
        form = rng.choice([key, f"{key}/pod", f"{key}/container.{container}"])
        out[form] = hostile_text(rng)
    return out


def hostile_pod(rng: random.Random, index: int) -> api.PodSandbox:
    uid = f"00000000-0000-0000-0000-{index:012d}"
    pod = api.PodSandbox(id=f"sb{index}", name=f"p{index}", uid=uid, namespace="fuzz")
    word = rng.choice(["", "-burstable", "-besteffort", "-weird"])
    pod.linux.cgroup_parent = rng.choice(
        [
            f"kubepods{word}-pod{uid.replace('-', '_')}.slice",
            "",
            "/",
            "..",
            "x" * 5000,
        ]
    )
    if rng.random() < 0.3:
        pod.linux.pod_resources.CopyFrom(hostile_resources(rng))
    pod.annotations.update(hostile_annotations(rng, "c"))
    return pod


def hostile_container(rng: random.Random, pod: api.PodSandbox, index: int) -> api.Container:
    name = rng.choice(["c", "c/../x", "", "x" * 300, "ç"])
    c = api.Container(
        id=rng.choice([f"ctr{index}", "", "../../x"]), pod_sandbox_id=pod.id, name=name
    )
    c.state = rng.choice(list(api.ContainerState.values()))  # type: ignore[assignment]
    if rng.random() < 0.95:
        c.linux.cgroups_path = rng.choice(
            [f"{pod.linux.cgroup_parent}:cri-containerd:{c.id}", "", "/../../"]
        )
        c.linux.resources.CopyFrom(hostile_resources(rng))
    c.annotations.update(hostile_annotations(rng, name))
    return c


# -- byte-level mutation ------------------------------------------------------------------


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random damage to `data`: bit flips, truncation, insertion, deletion, ..."""
    buf = bytearray(data)
    kind = rng.randrange(8)
    if kind == 0 and buf:  # flip 1-8 bits
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
    elif kind == 1 and buf:  # truncate
        del buf[rng.randrange(len(buf)) :]
    elif kind == 2:  # insert random bytes
        at = rng.randint(0, len(buf))
        buf[at:at] = rng.randbytes(rng.randint(1, 32))
    elif kind == 3 and buf:  # delete a slice
        at = rng.randrange(len(buf))
        del buf[at : at + rng.randint(1, 16)]
    elif kind == 4 and buf:  # duplicate a slice
        at = rng.randrange(len(buf))
        buf[at:at] = buf[at : at + rng.randint(1, 64)]
    elif kind == 5 and buf:  # a huge varint (length or number)
        at = rng.randrange(len(buf))
        buf[at:at] = b"\xff" * 9 + b"\x01"
    elif kind == 6:  # random bytes entirely
        buf = bytearray(rng.randbytes(rng.randint(0, 256)))
    else:  # set random bytes to 0x00 / 0xff
        for _ in range(rng.randint(1, 8)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.choice([0, 0xFF, 0x80])
    return bytes(buf)
