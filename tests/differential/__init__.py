"""The differential test: our policies against nri-plugins v0.14.0, container by container.

Both plugins run side by side, each behind its own real NRI runtime library, on the same
machine and configuration, fed the same seeded operations; every container's cpuset CPUs
and memory nodes are compared after every step. Modules, in the order a run uses them:

* `gen`: machines, balloons configurations and operations drawn from a seed (or from
  hypothesis, to shrink a divergence);
* `machines`: the shipped machines, random ones, the configurations;
* `host`: the host root both plugins read the machine from;
* `plugins`: one side (fake runtime + plugin process) and what its runtime knows;
* `run`: one case on both sides, every observation;
* `classes`: the documented difference classes (docs/policies.md);
* `profile`: the CI profile, the long run, the counts, the shrinking search;
* ``__main__``: ``python -m tests.differential`` (docs/policies.md, "Differential test").
"""
