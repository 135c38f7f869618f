"""Out-of-band controls: RDT (resctrl) class and pod groups, block I/O classes, CPU classes.

`names` validates what becomes a path, `classes` chooses a container's classes (pure),
`resctrl` (a package), `blockio` and `cpuclass` (a package: cpufreq, cpuidle and uncore
files) compute file contents (pure) and write them under a root (shell), `hooks`
declares what the pipeline calls on a controller, and `wiring` builds the controllers and
the class selector from the configuration.
"""
