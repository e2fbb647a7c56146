"""The shared core: what the server and every agent's cache both run.

The entry format and its hash chain (`entry`), operations and their
validation (`operations`), limits and model identity, the memory row, the fold
of entries into projections (`projections`, `revisions`, `conflicts`), the
indexes and search (`vectors`, `vector_mirror`, `search`, `listings`), the
protobuf codec, the secret scanner, operation signing, certificate contents and
wire metadata keys, and opening SQLite with sqlite-vec (`db`, `migrations`).

The rule, checked by `tests/unit/test_architecture.py`: nothing here imports
the rest of `server`, `agent_client`, `mcp_shim` or grpc. The generated
protobuf messages (`mnemosync.v1.memory_pb2`) are the contract and may be used.
"""
