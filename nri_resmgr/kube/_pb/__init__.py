"""Generated protobuf code of the kubelet's PodResources API (tools/genproto.py)."""
