"""Registering MemoryService with request decoding that never ends in INTERNAL (tolerant decoding).

grpc answers a request whose bytes do not parse (invalid UTF-8 in a string
field, truncated or random bytes) with INTERNAL "Exception deserializing
request!", before the servicer runs. Here each method decodes through
`_tolerant`, which hands the servicer an `UndecodableRequest` instead; the
servicer's `_rpc` wrapper turns it into INVALID_ARGUMENT naming the message.
Responses may also arrive already serialized (bytes) and pass through as they
are. Otherwise this is exactly what the generated `add_MemoryServiceServicer_to_server` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError

from mnemosync.v1 import memory_pb2

SERVICE = memory_pb2.DESCRIPTOR.services_by_name["MemoryService"]
_HANDLERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


@dataclass(frozen=True)
class UndecodableRequest:
    """Stands in for a request whose bytes are not a valid message of its type."""

    message_type: str
    reason: str

    def describe(self) -> str:
        """The INVALID_ARGUMENT message."""
        return (f"the request is not a valid {self.message_type}: {self.reason}; string fields must be "
                "valid UTF-8 and the bytes a serialized message of that type")


def _tolerant(message_class):
    name = message_class.DESCRIPTOR.full_name

    def decode(data: bytes):
        try:
            return message_class.FromString(data)
        except (DecodeError, ValueError) as exc:
            return UndecodableRequest(name, str(exc) or type(exc).__name__)

    return decode


def _serializer(message_class):
    """Serializes a response, or passes on one the servicer already serialized (a live entry that many
    Subscribe streams share is serialized once)."""
    serialize = message_class.SerializeToString

    def encode(message) -> bytes:
        return message if isinstance(message, bytes) else serialize(message)

    return encode


def add_memory_service(servicer, server: grpc.Server) -> None:
    """Registers `servicer`'s methods on `server`, decoding requests with `_tolerant`."""
    handlers = {}
    for method in SERVICE.methods:
        request_class = getattr(memory_pb2, method.input_type.name)
        response_class = getattr(memory_pb2, method.output_type.name)
        make = _HANDLERS[method.client_streaming, method.server_streaming]
        # A client stream's messages reach the method one by one, past `_rpc`'s check: decode those strictly.
        decode = request_class.FromString if method.client_streaming else _tolerant(request_class)
        handlers[method.name] = make(getattr(servicer, method.name), request_deserializer=decode,
                                     response_serializer=_serializer(response_class))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))
    server.add_registered_method_handlers(SERVICE.full_name, handlers)
