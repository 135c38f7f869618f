"""nri-resmgr: a node resource manager for Kubernetes, plugged into the runtime over NRI."""

__version__ = "0.1.0"
