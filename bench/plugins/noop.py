"""A no-op NRI plugin: subscribes to CreateContainer and changes nothing (benchmark peer)."""

from nri_api import Plugin, api


class Noop(Plugin):
    """Answers every CreateContainer with an empty adjustment."""

    def create_container(self, pod: api.PodSandbox, container: api.Container) -> None:
        return None


if __name__ == "__main__":
    raise SystemExit(Noop.main())
