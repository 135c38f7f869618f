"""The Kubernetes side: a small REST client and what the daemon does with it.

`client` (the REST client and kubeconfig/in-cluster credentials), `config_source` (which
document is in force, ConfigMaps first, and live reload), `report` (node reports:
NodeResourceTopology and friends) and `agent` (the watchers and reporters the daemon runs
when it knows its node name).  Nothing here is imported before the daemon registers with
the runtime (tests/unit/resmgr/test_startup_imports.py): this module imports nothing.
"""
