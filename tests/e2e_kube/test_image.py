"""The image from tools/build-image.sh, run by a real containerd the way the chart runs it.

The archive is imported into containerd's `k8s.io` namespace with `ctr images import`, and
its two roles run through CRI with the chart's security context (read-only root file
system, every capability dropped, no privilege escalation):

* the daemon (`run`) registers with containerd's NRI socket (mounted at the chart's
  /var/run/nri) and places the next container: with CPU 0 reserved, a BestEffort
  busybox container's cgroup shows cpuset.cpus 1; `crictl stop` ends it with SIGTERM
  (exec-form entry point: the daemon is PID 1) well inside the grace period;
* the `enable-nri` init container's command (`/bin/sh -c "nri-resmgr enable-nri ..."`,
  capability DAC_OVERRIDE only) turns NRI on in a containerd config.toml under /host.

The daemon's start-to-registered time inside the image (container started to containerd's
"synchronized" log line) is appended to .cache/e2e/latency/image-startup.jsonl.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.e2e import cri
from tests.e2e.containerd import CACHE, Containerd, log_time
from tests.e2e_kube.image import Image
from tests.support.requirements import require_two_cpus
from tests.support.waiting import wait_for

PLUGIN = "90-resmgr"
CONFIG = {"policy": "topology-aware", "policyConfig": {"reservedResources": {"cpu": "cpuset:0"}}}
#: the chart's securityContext of the daemon container (templates/daemonset.yaml)
LOCKED_DOWN = {
    "readonly_rootfs": True,
    "no_new_privs": True,
    "capabilities": {"drop_capabilities": ["ALL"]},
}




def _image_container(
    pod: cri.Pod,
    image: Image,
    name: str,
    *,
    args: list[str] | None = None,
    command: list[str] | None = None,
    mounts: list[dict[str, Any]],
    security: dict[str, Any],
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "metadata": {"name": name, "attempt": 0},
        "image": {"image": image.ref},
        "mounts": mounts,
        "log_path": f"{name}.log",
        "linux": {"resources": cri.BURSTABLE_SMALL.linux(), "security_context": security},
    }
    if args is not None:
        config["args"] = args
    if command is not None:
        config["command"] = command
    return config


def _create(ctd: Containerd, pod: cri.Pod, config: dict[str, Any]) -> cri.Container:
    name = config["metadata"]["name"]
    path = ctd.layout.base / "specs" / f"ctr-{pod.name}-{name}-{pod.uid[:8]}.json"
    path.write_text(json.dumps(config))
    r = ctd.crictl("create", pod.id, str(path), str(pod.config_path))
    return cri.Container(r.stdout.strip(), name, pod)


def _state(ctd: Containerd, container: cri.Container) -> dict[str, Any]:
    status: dict[str, Any] = cri.inspect(ctd, container)["status"]
    return status


def _container_log(ctd: Containerd, pod: cri.Pod, name: str) -> str:
    path = ctd.layout.base / "pod-logs" / pod.uid / f"{name}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _synchronized_at(ctd: Containerd) -> float | None:
    for line in ctd.log_text().splitlines():
        if PLUGIN in line and (
            "connected and synchronized" in line or "synchronization success" in line
        ):
            return log_time(line)
    return None


def _record_startup(ctd: Containerd, image: Image, seconds: float) -> None:
    out = CACHE / "latency"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "image-startup.jsonl", "a") as f:
        f.write(
            json.dumps(
                {
                    "what": "image: container start to NRI synchronized",
                    "containerd": ctd.release.version,
                    "image": image.ref,
                    "image_bytes": image.size,
                    "seconds": round(seconds, 3),
                    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
            + "\n"
        )


def test_daemon_in_the_image_registers_and_places_containers(
    containerd: Containerd, nri_image: Image, tmp_path: Path
) -> None:
    require_two_cpus()
    ctd = containerd
    ctd.import_image(nri_image.archive)
    listed = ctd.ctr("-n", "k8s.io", "images", "ls", "-q").stdout.split()
    assert nri_image.ref in listed, f"{nri_image.ref} not among imported images {listed}"

    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "config.yaml").write_text(json.dumps(CONFIG))
    state = tmp_path / "state"
    state.mkdir()
    pod = cri.run_pod(ctd, "nri-resmgr", namespace="kube-system")
    daemon = _create(
        ctd,
        pod,
        _image_container(
            pod,
            nri_image,
            "nri-resmgr",
            args=[
                "run",
                "--config=/etc/nri-resmgr/config.yaml",
                "--socket=/var/run/nri/nri.sock",
                "--plugin-index=90",
                "--plugin-name=resmgr",
                "--sysfs-root=/host",
                "--state-dir=/var/lib/nri-resmgr",
            ],
            mounts=[
                {
                    "container_path": "/etc/nri-resmgr",
                    "host_path": str(config_dir),
                    "readonly": True,
                },
                {"container_path": "/var/run/nri", "host_path": str(ctd.layout.base)},
                {"container_path": "/host/sys", "host_path": "/sys", "readonly": True},
                {"container_path": "/var/lib/nri-resmgr", "host_path": str(state)},
            ],
            security=LOCKED_DOWN,
        ),
    )
    started = time.time()
    cri.start_container(ctd, daemon)
    synced = wait_for(
        lambda: (
            _synchronized_at(ctd)
            or (_state(ctd, daemon)["state"] == "CONTAINER_EXITED" and "exited")
        ),
        timeout=60,
        what="the daemon in the image to register with containerd's NRI",
    )
    assert synced != "exited", (
        f"the daemon container exited:\n{_container_log(ctd, pod, 'nri-resmgr')[-3000:]}"
    )
    _record_startup(ctd, nri_image, float(synced) - started)

    workload_pod = cri.run_pod(ctd, "shared", qos=cri.QoS.BESTEFFORT)
    workload = cri.run_container(ctd, workload_pod, "sleeper")
    assert cri.cpus_of(ctd, workload) == "1", (
        "a BestEffort container must run on the shared CPU 1 (CPU 0 is reserved); "
        f"daemon log:\n{_container_log(ctd, pod, 'nri-resmgr')[-2000:]}"
    )

    before = time.monotonic()
    ctd.crictl("stop", "--timeout", "30", daemon.id)
    took = time.monotonic() - before
    status = _state(ctd, daemon)
    assert status["state"] == "CONTAINER_EXITED"
    assert status["exitCode"] == 0, (
        f"SIGTERM should end the daemon cleanly; exit code {status['exitCode']}:\n"
        f"{_container_log(ctd, pod, 'nri-resmgr')[-2000:]}"
    )
    assert took < 15, f"stopping took {took:.1f} s: SIGTERM did not reach the daemon"


def test_enable_nri_init_command_in_the_image(
    containerd: Containerd, nri_image: Image, tmp_path: Path
) -> None:
    ctd = containerd
    ctd.import_image(nri_image.archive)
    host_etc = tmp_path / "etc-containerd"
    host_etc.mkdir()
    toml = host_etc / "config.toml"
    toml.write_text('version = 2\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n')
    pod = cri.run_pod(ctd, "enable-nri", namespace="kube-system")
    init = _create(
        ctd,
        pod,
        _image_container(
            pod,
            nri_image,
            "enable-nri",
            # the chart's init container command (templates/daemonset.yaml)
            command=[
                "/bin/sh",
                "-c",
                "nri-resmgr enable-nri --runtime containerd "
                "--config /host/etc/containerd/config.toml --registration-timeout 15s",
            ],
            mounts=[{"container_path": "/host/etc/containerd", "host_path": str(host_etc)}],
            security={
                **LOCKED_DOWN,
                "capabilities": {
                    "drop_capabilities": ["ALL"],
                    "add_capabilities": ["DAC_OVERRIDE"],
                },
            },
        ),
    )
    cri.start_container(ctd, init)
    status = wait_for(
        lambda: (s := _state(ctd, init))["state"] == "CONTAINER_EXITED" and s,
        timeout=60,
        what="the enable-nri container to finish",
    )
    log = _container_log(ctd, pod, "enable-nri")
    assert status["exitCode"] == 0, f"enable-nri failed:\n{log}"
    text = toml.read_text()
    assert "disable = false" in text, f"NRI still off in the edited config:\n{text}"
    assert 'plugin_registration_timeout = "15s"' in text, text
