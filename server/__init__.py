"""mnemosync server: the changelog store, governance, identity and the gRPC service.

`mnemosync.kernel` is the shared kernel (also run by every agent's cache); the rest
is the server's own: the ledger (`ledger`) over a changelog record (`record`,
`sqlite_record`, `postgres_record`) through its writer (`group_commit`),
admission and governance of writes, identity and TLS, and the gRPC edge
(`service`, `app`). Its README's "Map of the code" lists every module.
"""

if __name__ != "mnemosync.server":  # the folder is mapped into the namespace; it is not a package of its own
    raise ImportError(f"import mnemosync.server, not {__name__}: mnemosync installs one namespace (see pyproject.toml)")
