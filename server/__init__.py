"""mnemosync server: the changelog store, its projections and the gRPC service.

The store modules (`db`, `changelog`, `projections`, `search`, `store`) never
import grpc; `service` and `app` translate between the wire and the store.
"""

__version__ = "0.1.0"
