"""The test kit: what more than one test file needs, in one place, named for what it is.

- `requirements`: what a test needs of the machine (`require`, `require_go`,
  `require_topologies`, `require_two_cpus`) and where the project (`REPO`) and
  ../shared/ (`SHARED`, `TOPOLOGIES`) are;
- `waiting`: polling for what another process or task makes true (`wait_for`,
  `wait_until`), never a timing assertion;
- `daemon`: daemon sessions, the daemon's plugin registered with an in-process runtime
  over a real socket (`daemon_session`, `start_daemon`, `resmgr_plugin`, ...), the
  tests' machine and configuration, the daemon's HTTP endpoint;
- `messages`: NRI messages as containerd sends them for the kubelet's pods (`pod`,
  `ctr`, `guaranteed`); `preregistered`: a plugin process started as a runtime starts a
  pre-registered one;
- `builders`: domain values as a policy sees them (`ctr`, `topo`, the real machines of
  ../shared/topologies); `balloons`: the balloons policy under test;
- `pipeline`: a pipeline under test (counting policies, the NRI messages of pods and
  containers); `logs`: a logger that drops everything and one that keeps every line;
- `restart_rule`: the restart rule as a checker; `hostile`: seeded generators of
  hostile input for the fuzz tests.

A helper that one file needs stays in that file; one that a second file needs moves here
(never copied).
"""
