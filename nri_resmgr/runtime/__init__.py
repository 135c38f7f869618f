"""The runtime side: the NRI plugin and the one-event-at-a-time flow behind it.

`adapter` turns NRI messages into domain values (`nri_resmgr.model`) and back; `pipeline`
takes one event at a time through adapter, class selection, policy and controllers and
commits only what was rendered; `daemon` is the `nri_api` Plugin subclass that wires the
NRI hooks, the configuration, metrics and the Kubernetes side to the pipeline.  Layers
(pyproject's `layers` contract): daemon over pipeline over adapter.  This module imports
nothing, so importing `nri_resmgr.runtime.adapter` does not pull in the daemon.
"""
