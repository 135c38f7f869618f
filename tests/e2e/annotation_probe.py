"""An NRI plugin that asks whether an annotation set in an adjustment survives (issue 24).

At CreateContainer it sets ``probe.nri-resmgr.test/meaning: <container name>`` in the
container's adjustment; at Synchronize it writes, as JSON to the path named by
``--out``, the annotations each reported container carries.  A restart of the plugin
then shows whether the runtime reports the adjusted annotation back.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from nri_api import Adjustment, Plugin, api

KEY = "probe.nri-resmgr.test/meaning"


class AnnotationProbe(Plugin):
    out: Path = Path("synchronize.json")

    def create_container(self, pod: api.PodSandbox, ctr: api.Container) -> Adjustment | None:
        return Adjustment().add_annotation(KEY, ctr.name)

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> None:
        seen = {c.name: dict(c.annotations) for c in containers}
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(seen))
        tmp.replace(self.out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    ns, rest = parser.parse_known_args()
    AnnotationProbe.out = Path(ns.out)
    raise SystemExit(AnnotationProbe.main(rest))
