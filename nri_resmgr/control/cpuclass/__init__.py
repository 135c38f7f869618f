"""CPU classes: a policy's class -> CPUs mapping into cpufreq, cpuidle and uncore files.

`plan` computes the file values, writes and restores (pure); `files` reads and writes
them under a sysfs root; `synthetic` writes such files for tests.  The class definitions
are `nri_resmgr.policy.cpu_classes`.
"""
