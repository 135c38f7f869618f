"""Seeded generators of hostile input shared by the fuzz tests.

Everything here draws from a `random.Random` given by the caller, so a case is reproduced
by its seed and index alone.  `hostile_*` give values a pod author or a broken runtime
could send; `mutate` damages an encoded message the ways a wire does (and worse).
`reader_work_bound` is how much work reading one such value may take, in calls
(`tests.support.work`): linear in its size.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Final

from nri_api import api

#: cases per CI run and the seed; override for a long run (docs/fuzzing.md)
ENV_CASES: Final = "NRI_RESMGR_FUZZ_CASES"
ENV_SEED: Final = "NRI_RESMGR_FUZZ_SEED"
DEFAULT_SEED: Final = 20261123


#: the work bound of an annotation reader: calls per character of the value, over a fixed
#: start; the worst of 1,500 `hostile_yaml` values made 28 a character (the test-hint
#: reader) and 56,788 calls in all (a 2,043-character value)
CALLS_PER_CHARACTER: Final = 200
CALLS_AT_LEAST: Final = 10_000


def reader_work_bound(value: str) -> int:
    """The calls reading `value` may make: `CALLS_PER_CHARACTER` a character, at least
    `CALLS_AT_LEAST`."""
    return CALLS_PER_CHARACTER * len(value) + CALLS_AT_LEAST


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
    f"prefer-cpu-priority.{DOMAIN}",
    f"require-isolated-cpus.{DOMAIN}",
    f"{DOMAIN}/affinity",
    f"{DOMAIN}/anti-affinity",
    f"affinity.{DOMAIN}",
    f"anti-affinity.{DOMAIN}",
)
#: the keys whose values are YAML rules or hints (`hostile_yaml` is drawn for them)
YAML_KEYS: Final = (
    f"{DOMAIN}/affinity",
    f"{DOMAIN}/anti-affinity",
    f"affinity.{DOMAIN}",
    f"anti-affinity.{DOMAIN}",
    f"test.topologyhints.{DOMAIN}",
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


def _alias_bomb(rng: random.Random, n: int) -> str:
    """A few KB of YAML whose aliases repeat to n**3 values ("billion laughs")."""
    a = "&a [" + ",".join(["x"] * n) + "]"
    b = "&b [" + ",".join(["*a"] * n) + "]"
    c = "[" + ",".join(["*b"] * n) + "]"
    if rng.random() < 0.5:  # affinity-shaped
        rule = "{match: {key: name, operator: In, values: %s}}"
        return "c: [" + ", ".join(rule % v for v in (a, b, c)) + "]"
    return "z: {Provider: " + a + ", Sockets: " + b + ", CPUs: " + c + "}"


def _expr(rng: random.Random, *, big: bool = False) -> str:
    key = rng.choice(
        [
            "name",
            "pod/name",
            "namespace",
            "pod/labels/app",
            ":name:namespace",
            "labels/",
            "pod/",
            "nosuch",
            "k" * 5000,
            "",
            ":/,name/pod/uid",
        ]
    )
    op = rng.choice(
        [
            "In",
            "NotIn",
            "Equals",
            "NotEqual",
            "Exists",
            "NotExist",
            "AlwaysTrue",
            "Matches",
            "MatchesAny",
            "MatchesNone",
            "MatchesNot",
            "Is",
            "",
            "X" * 10_000,
        ]
    )
    count = rng.choice([0, 1, 2, 3, 300, 100_000] if big else [0, 1, 2, 3, 300])
    values = ",".join([rng.choice(["a", "c*", "[!x]", "*", "7", "null", "[a]"])] * count)
    return f"{{key: {key}, operator: {op}, values: [{values}]}}"


_WEIGHTS: Final = ("1", "-1", "0", "99999999", "-99999999", "1" * 5000, "1e400", "x", ".nan")


def _rules(rng: random.Random, rules: int) -> str:
    """Affinity rules of container ``c``: one may have 100,000 values, 300 have few."""
    return (
        "c: ["
        + ", ".join(
            f"{{scope: {_expr(rng)}, match: {_expr(rng, big=rules == 1)}, "
            f"weight: {rng.choice(_WEIGHTS)}}}"
            for _ in range(rules)
        )
        + "]"
    )


def hostile_yaml(rng: random.Random) -> str:
    """A value for the YAML annotations (affinity rules, test topology hints)."""
    makers: list[Callable[[], str]] = [
        lambda: _alias_bomb(rng, rng.choice([3, 30, 1000])),
        lambda: rng.choice(["[", "{a: "]) * rng.choice([31, 33, 2000]),
        lambda: "c: [" + ",".join(f"o{i}" for i in range(rng.choice([1, 2, 5000, 50_000]))) + "]",
        lambda: _rules(rng, rng.choice([1, 2, 300])),
        lambda: "c: [{match: {key: name, operator: In, values: [a]}, 1: 2, [x]: y}]",
        lambda: "c: [a]\n---\nc: [b]\n",
        lambda: "c: !!python/object/apply:os.system [true]",
        lambda: "? [a]\n: b",
        lambda: rng.choice(["null", "~", "[]", "{}", "7", '"c"', "c: 7", "c: [[a]]", "c: {a: b}"]),
        lambda: "{}: {{CPUs: {}, NUMAs: {}, Sockets: {}, Cores: 1}}".format(
            rng.choice(["a", "", "1" * 5000]),
            hostile_cpuset(rng)[:2000],
            rng.choice(["0", "0-1", "9", "-1", "[0, 1]"]),
            rng.choice(["0", "1", "7", "x"]),
        ),
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
        if rng.random() < 0.25:
            key = rng.choice(YAML_KEYS)
            form = (
                key
                if "/" in key
                else rng.choice([key, f"{key}/pod", f"{key}/container.{container}"])
            )
            out[form] = hostile_yaml(rng) if rng.random() < 0.8 else hostile_text(rng)
            continue
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
    if rng.random() < 0.4:
        add_hostile_devices(rng, c)
    return c


#: device numbers of `hostile_sysfs` (and some that do not exist)
DEVICE_NUMBERS: Final = ((259, 0), (5, 1), (5, 2), (5, 3), (7, 7), (226, 0))


def add_hostile_devices(rng: random.Random, c: api.Container) -> None:
    """Devices and mounts a runtime could report (resolved under `hostile_sysfs`)."""
    count = rng.choice([1, 2, 3, 300])
    long = "d" * 5000 if count < 300 else "d"  # 300 long ones would not fit a message
    for _ in range(count):
        major, minor = rng.choice(DEVICE_NUMBERS)
        if rng.random() < 0.3:
            major, minor = rng.choice([(0, 0), (-1, 5), (1 << 40, 1), (259, -1), (2**31, 2**31)])
        c.linux.devices.add(
            path=rng.choice(["/dev/x", "", "\x00", "/dev/" + long]),
            type=rng.choice(["c", "b", "p", "", "cc"]),
            major=major,
            minor=minor,
        )
    mounts = rng.choice([1, 2, 300]) if count < 300 else 1
    long = "s" * 5000 if mounts < 300 else "s"
    for _ in range(mounts):
        c.mounts.add(
            source=rng.choice(
                [
                    "/sys/devices/pci0000:3b/0000:3b:00.0",
                    "/sys/../../../etc",
                    "/sys/\x00",
                    "/data\x00x",
                    "/" + long,
                    "/proc/self/root",
                    "/dev/null",
                    "/dev/zero",
                    "/sys/dev/char/5:1",
                    "relative",
                ]
            ),
            destination=rng.choice(["/data", "/etc/x", "", "/" + long]),
            options=rng.choice([[], ["ro"], ["rw", "bind"]]),
        )


def hostile_sysfs(root: Path) -> None:
    """A sysfs of the fuzz machine with one PCI device and hostile entries: a symlink
    loop (5:1), a FIFO as ``numa_node`` (5:2), ``/dev/zero`` as ``local_cpulist`` and a
    1 MB ``numa_node`` (5:3), a link outside the root (7:7) and looping RAID slaves."""
    from nri_resmgr.topology.synthetic import write_sysfs

    devices = [{"pci": "0000:3b:00.0", "name": "nvme0n1", "node": 1, "block": "259:0"}]
    write_sysfs(
        {"packages": 1, "dies": 1, "nodes": 2, "cores": 4, "threads": 2}, root, devices=devices
    )
    char = root / "sys/dev/char"
    char.mkdir(parents=True, exist_ok=True)
    (char / "5:1").symlink_to("loop")
    (char / "loop").symlink_to("5:1")
    for minor, name in ((2, "fifo"), (3, "zero")):
        d = root / "sys/devices/hostile" / name
        d.mkdir(parents=True)
        (char / f"5:{minor}").symlink_to(d)
    os.mkfifo(root / "sys/devices/hostile/fifo/numa_node")
    (root / "sys/devices/hostile/zero/local_cpulist").symlink_to("/dev/zero")
    (root / "sys/devices/hostile/zero/numa_node").write_text("1" * (1 << 20))
    (char / "7:7").symlink_to("/proc/self")
    slaves = root / "sys/devices/pci0000:3b/0000:3b:00.0/nvme/nvme0/nvme0n1/slaves"
    slaves.mkdir(parents=True, exist_ok=True)
    (slaves / "a").symlink_to("b")
    (slaves / "b").symlink_to("a")


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
