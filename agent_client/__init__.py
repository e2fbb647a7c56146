"""mnemosync agent client: the library every agent process uses.

It talks to the server over gRPC, keeps a local cache (SQLite with the same
vector and keyword indexes), computes embeddings with llama.cpp, and queues
writes in a durable outbox while the server cannot be reached.
"""

if __name__ != "mnemosync.agent":  # the folder is mapped into the namespace; it is not a package of its own
    raise ImportError(f"import mnemosync.agent, not {__name__}: mnemosync installs one namespace (see pyproject.toml)")
