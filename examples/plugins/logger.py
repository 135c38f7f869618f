"""Log every NRI event this plugin sees (to --log-file, $NRI_PLUGIN_LOG or stderr).

Config string (from Configure; a pre-registered plugin gets /etc/nri/conf.d/NN-name.conf):
empty for all events, or comma-separated hook names like "create_container,start_container".

    python logger.py --socket /var/run/nri/nri.sock --idx 10 --name logger
"""

from typing import Any

from nri_api import Event, Plugin, RuntimeInfo
from nri_api.stub import HOOK_EVENTS


class Logger(Plugin):
    def configure(self, config: str, runtime: RuntimeInfo) -> list[Event] | None:
        self.log.info("runtime %s %s (NRI %s)", runtime.name, runtime.version, runtime.nri_version)
        names = [name.strip() for name in config.split(",") if name.strip()]
        if unknown := sorted(set(names) - set(HOOK_EVENTS)):
            raise ValueError(f"logger config: unknown hooks {unknown}, expected {[*HOOK_EVENTS]}")
        return [HOOK_EVENTS[name] for name in names] or None

    def synchronize(self, pods: Any, containers: Any) -> None:
        self.log.info("synchronize: %d pods, %d containers", len(pods), len(containers))


def logging_hook(hook: str) -> Any:
    def log_event(self: Logger, *args: Any) -> None:
        self.log.info("%s %s", hook, " ".join(getattr(a, "name", type(a).__name__) for a in args))

    return log_event


for hook in HOOK_EVENTS:  # a logging hook for each event subscribes the plugin to all
    setattr(Logger, hook, logging_hook(hook))

if __name__ == "__main__":
    raise SystemExit(Logger.main())
