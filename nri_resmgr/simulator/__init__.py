"""The simulator: drive the real adapter, pipeline and policy with kubelet-shaped events.

Theory of operation
-------------------
A scenario is a topology, a policy with its configuration, and a list of steps.  The
simulator plays the part of the kubelet and containerd: for each step it builds the NRI
messages those two would build, hands them to a real `Pipeline` (the same object the
daemon uses, with the real adapter and policy behind it) and applies what comes back the
way the runtime would: an adjustment sets the new container's cpuset, an update changes
another container's.  After each step it reports every live container.

How a pod becomes NRI messages (what the kubelet computes and containerd passes on):

* requests default to limits (API defaulting); the pod's QoS class is Guaranteed when
  every container has CPU and memory limits equal to its requests, BestEffort when no
  container asks for anything, Burstable otherwise;
* the sandbox's cgroup parent encodes the QoS class (``kubepods-burstable-pod<uid>.slice``
  for the systemd driver, ``/kubepods/burstable/pod<uid>`` for cgroupfs; Guaranteed pods
  have no class component);
* each container gets CFS shares ``max(2, milli * 1024 / 1000)`` from its CPU request,
  quota ``milli * 100`` with period 100000 from its CPU limit, and a memory limit;
* pod annotations are the pod's; init containers are listed in the pod annotation
  ``init-containers.resource-policy.nri.io`` (see `nri_resmgr.runtime.adapter`: the real kubelet
  marks nothing);
* ids are deterministic (hashes of names and a counter), so outputs can be compared.

Steps:

* ``create``: RunPodSandbox; each init container in turn is created, started, stopped and
  removed; then the app containers are created and started.  A failed creation (e.g.
  overcommit) is reported in the step's ``errors`` and that container is skipped;
* ``delete``: the pod's containers are stopped and removed, then the sandbox;
* ``update``: a container's resources change (in-place resize: UpdateContainer);
* ``restart``: the daemon restarts: a fresh pipeline is synchronized with the containers
  as the runtime reports them (their current cpusets), which shows which placements are
  kept and which are moved;
* ``synchronize``: pods already running with their containers' cpusets and memory nodes
  (what `nri-resmgr dump` writes from a live node) join, and the plugin restarts and
  synchronizes every live container as in ``restart``; the step lists the containers
  that did not keep their placement (``moved``).  Over a dump with ``--config NEW`` that
  is the what-if of applying NEW to the node: which containers would move, and where.

Bounds: a scenario file is read through `nri_resmgr.documents` (size, depth, numbers);
then at most `MAX_STEPS` steps, `MAX_CONTAINERS` containers created, `MAX_RESTARTS`
restarts and `MAX_ROWS` container rows over all reports, and quantities of at most
`MAX_CPU_MILLI` and `MAX_MEMORY`; beyond them the scenario is refused with a
`ScenarioError` before any step runs, so no scenario costs more than seconds.

Everything here is deterministic and in memory, except the optional RDT and block I/O
controllers, which write under the directories given to them.
"""
