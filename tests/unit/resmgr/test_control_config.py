"""The whole `control:` section in one model, and the examples in docs/rdt-blockio.md."""

from __future__ import annotations

from pathlib import Path

import yaml

from nri_resmgr.control.blockio import BlockIOController, Device
from nri_resmgr.control.classes import ClassChoice, select_classes
from nri_resmgr.control.config import ControlConfig
from nri_resmgr.control.resctrl import RdtController, read_info
from nri_resmgr.control.synthetic import INTEL_SKX, make_resctrl_tree
from nri_resmgr.model import ContainerID, ContainerInfo, Pod, PodID, QoSClass, Request
from tests.support.requirements import REPO

DOC = (REPO / "docs" / "rdt-blockio.md").read_text()


def yaml_after(heading: str, index: int = 0) -> dict[str, object]:
    block = DOC.split(heading, 1)[1].split("```yaml")[1 + index].split("```")[0]
    loaded = yaml.safe_load(block)
    assert isinstance(loaded, dict)
    return loaded


def merged() -> ControlConfig:
    selection = yaml_after("## Choosing a class")["control"]
    rdt = yaml_after("## RDT class configuration")["control"]
    blockio = yaml_after("## Block I/O classes")["control"]
    assert isinstance(selection, dict) and isinstance(rdt, dict) and isinstance(blockio, dict)
    return ControlConfig.model_validate({
        "rdt": {**selection["rdt"], **rdt["rdt"]},
        "blockio": {**selection["blockio"], **blockio["blockio"]},
    })


def test_doc_examples_load_and_drive_both_controllers(tmp_path: Path) -> None:
    config = merged()
    root = tmp_path / "resctrl"
    mounts = make_resctrl_tree(root, INTEL_SKX)
    rdt = RdtController(root, config.rdt, state_dir=tmp_path / "state",
                        info=read_info(root, mounts=mounts))
    assert rdt.planned() == {
        "gold": "L3:0=78;1=78\nMB:0=60;1=60\n",
        "silver": "L3:0=f;1=f\nMB:0=20;1=20\n",
        "BestEffort": "L3:0=780;1=600\nMB:0=100;1=100\n",
        "split": "L3:0=3f;1=3f\nMB:0=100;1=100\n",
    }
    for row in ("| `gold` | `L3:0=78;1=78` / `MB:0=60;1=60` |",
                "| `silver` | `L3:0=f;1=f` / `MB:0=20;1=20` |",
                "| `BestEffort` | `L3:0=780;1=600` / `MB:0=100;1=100` |"):
        assert row in DOC
    blk = BlockIOController(tmp_path, config.blockio, version="v2",
                            dry_run=True, resolve_device=lambda p: [Device(252, 0, p)]
                            if p == "/dev/vda" else [])
    assert [v for _, v in blk.apply("/pod", "slowdisk")] == [
        "default 100", "252:0 200", "252:0 rbps=max wbps=1048576 riops=max wiops=max"]

    meta = yaml_after("## Choosing a class", 1)["metadata"]
    assert isinstance(meta, dict)
    pod = Pod(id=PodID("s"), uid="u-1", name="db", namespace="default",
              qos_class=QoSClass.BEST_EFFORT, annotations=meta["annotations"])
    app = ContainerInfo(id=ContainerID("c1"), name="app", pod=pod, request=Request())
    sidecar = ContainerInfo(id=ContainerID("c2"), name="sidecar", pod=pod, request=Request())
    known = {"known_rdt": rdt.class_names, "known_blockio": blk.class_names}
    assert select_classes(app, config, **known) == ClassChoice("gold", "slowdisk")
    assert select_classes(sidecar, config, **known) == ClassChoice("BestEffort", "slowdisk")
    other = ContainerInfo(id=ContainerID("c3"), name="x", pod=Pod(
        id=PodID("t"), uid="u-2", name="p", namespace="default",
        qos_class=QoSClass.BURSTABLE), request=Request())
    assert select_classes(other, config, **known) == ClassChoice("silver", None)
