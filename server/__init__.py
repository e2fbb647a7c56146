"""mnemosync server: the changelog store, governance, identity and the gRPC service.

`server.core` is the shared core (also run by every agent's cache); the rest is
the server's own: the storage interface (`store`) and its SQLite implementation
(`sqlite_store`), admission and governance of writes, identity and TLS, and the
gRPC edge (`service`, `app`). The README's "Map of the code" lists every module.
"""

__version__ = "0.1.0"
