"""Operations: what an operator installs, enables, watches and resets.

`install` (the pre-registered launcher), `runtime_config` (enabling NRI in the
containerd/CRI-O configuration), `logs` (structlog setup, the event log), `metrics`
(Prometheus and health over HTTP) and `reset` (the pure planning half of
`nri-resmgr reset`).  None of them knows the pipeline or the policies; the runtime and
the commands use them.  This module imports nothing, so the launcher's path pays only for
the modules it names.
"""
