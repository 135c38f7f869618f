"""Reject OCI hooks injected by other plugins, unless the pod allows it (NRI v0.10+).

    hooks.example.nri.io/allow: "true"

Config string (optional): comma-separated plugin names (NN-name) whose hooks are trusted.

    python validate_hooks.py --socket /var/run/nri/nri.sock --idx 99 --name validate-hooks
"""

from nri_api import Plugin, RuntimeInfo, api

ALLOW = "hooks.example.nri.io/allow"


class ValidateHooks(Plugin):
    trusted: frozenset[str] = frozenset()

    def configure(self, config: str, runtime: RuntimeInfo) -> None:
        self.trusted = frozenset(name.strip() for name in config.split(",") if name.strip())

    def validate_container_adjustment(
        self, req: api.ValidateContainerAdjustmentRequest
    ) -> str | None:
        if not any(getattr(req.adjust.hooks, k) for k in api.Hooks.DESCRIPTOR.fields_by_name):
            return None
        if req.pod.annotations.get(ALLOW) == "true":
            return None
        owners = req.owners.owners.get(req.container.id, api.FieldOwners())
        hook_owners = owners.simple.get(api.Field.Value("OciHooks"), "")
        untrusted = sorted(set(filter(None, hook_owners.split(","))) - self.trusted)
        if hook_owners and not untrusted:
            return None
        return f"OCI hooks by {', '.join(untrusted) or 'unknown plugins'} need {ALLOW}=true"


if __name__ == "__main__":
    raise SystemExit(ValidateHooks.main())
