"""nri_api: the Node Resource Interface (NRI) for Python.

Layers (each usable on its own): `nri_api.mux` (the NRI connection multiplexer),
`nri_api.ttrpc` (ttrpc framing), `nri_api.api` (the NRI protobuf messages), the asyncio
shell `nri_api.transport`, and the plugin stub `nri_api.stub`.
"""
