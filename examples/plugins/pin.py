from nri_api import Adjustment, Plugin, api


class PinToFirstCpus(Plugin):
    def create_container(self, pod: api.PodSandbox, container: api.Container) -> Adjustment:
        return Adjustment().set_cpuset("0-1").add_env("PINNED_BY", self.full_name)


if __name__ == "__main__":
    raise SystemExit(PinToFirstCpus.main())
