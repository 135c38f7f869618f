"""nri-plugins' published e2e expectations, ported: their machines, configs and `verify`s."""
