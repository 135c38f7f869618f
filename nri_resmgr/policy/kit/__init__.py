"""The policy kit: what every placement policy would otherwise write for itself.

A policy is its state, its placement and its rendering (`nri_resmgr.policy.base.Policy`);
the rules below are the same in every policy and live here once:

- `constraints`: available and reserved CPUs (``availableResources.cpu``,
  ``reservedResources.cpu``), the namespaces always reserved, the CPU class names a
  configuration refers to, the DRAM near a set of CPUs;
- `rebuild`: the plumbing of Synchronize (each container once, as first listed; the
  reports holding each CPU; the updates a rebuilt state's rendering implies) and
  `restart`, the one rule by which placement records are used (issue 24);
- `records`: placement records, the values and their file form;
- `annotations`: the annotation keys more than one policy reads.

Alongside: `nri_resmgr.policy.decide` (a next state to a `Decision`: the updates from the
renderings that changed) and `nri_resmgr.policy.common` (the CPU picker, quantities,
claim order), which every policy already shares.
"""
