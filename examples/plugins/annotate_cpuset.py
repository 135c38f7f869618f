"""Pin each container to the CPUs / memory nodes named in its pod's annotation.

    cpuset.example.nri.io/container.NAME: "cpus=2-3; mems=0"

Config string (optional, same syntax): the cpuset of containers without the annotation.

    python annotate_cpuset.py --socket /var/run/nri/nri.sock --idx 20 --name annotate-cpuset
"""

from nri_api import Adjustment, Plugin, RuntimeInfo, api

KEY = "cpuset.example.nri.io/container."


def parse(spec: str) -> dict[str, str]:
    fields = dict(part.strip().partition("=")[::2] for part in spec.split(";") if part.strip())
    if bad := sorted(set(fields) - {"cpus", "mems"}):
        raise ValueError(f"cpuset spec {spec!r}: expected keys cpus and mems, found {bad}")
    return fields


class AnnotateCpuset(Plugin):
    default = ""

    def configure(self, config: str, runtime: RuntimeInfo) -> None:
        self.default = config if parse(config) else ""  # parse() also validates it

    def create_container(self, pod: api.PodSandbox, ctr: api.Container) -> Adjustment | None:
        spec = parse(pod.annotations.get(KEY + ctr.name, self.default))
        self.log.info("%s/%s %s: %s", pod.namespace, pod.name, ctr.name, spec or "untouched")
        adjust = Adjustment().set_cpuset(spec["cpus"]) if "cpus" in spec else Adjustment()
        if "mems" in spec:
            adjust.set_cpuset_mems(spec["mems"])
        return adjust if spec else None


if __name__ == "__main__":
    raise SystemExit(AnnotateCpuset.main())
