"""A kube-scheduler extender that places pods by the NUMA zones nodes report.

`fit` (pure: what a pod needs, what a node's NodeResourceTopology offers, the filter and
the score), `server` (the asyncio HTTP shell kube-scheduler calls, and the cache of
NodeResourceTopology objects kept by a list and watch).  Run by
``nri-resmgr scheduler-extender``; nothing of the daemon imports it.
"""
