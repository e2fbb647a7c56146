"""MCP over JSON-RPC 2.0 lines: the shim's own server, small enough that the local agent needs no MCP SDK.

`McpServer` answers what a Claude Code session asks of the shim, with the
answers the MCP SDK's `MCPServer` gave (`tests/system/test_mcp_protocol.py`
compares them with its recorded ones): `initialize` (the client's protocol
version when it is one of `PROTOCOL_VERSIONS`, else the newest), `ping`,
`tools/list` and `tools/call` (`mnemosync.shim.tool_registry`),
`resources/list` and `resources/read`, empty prompt and template lists;
`notifications/initialized` and `notifications/cancelled` (the request's
work is cancelled and it is never answered). Any other method is
METHOD_NOT_FOUND; a request other than `ping` before `initialize`, or params of
the wrong shape, INVALID_PARAMS. The server may push notifications of its own
(`notify`: `mnemosync.shim.channel`).

Requests are answered concurrently, each in a task of its own, at most `most`
at a time: past that, the connection is read no further until one is answered
(a session that never reads its answers costs a bounded amount of memory).
One message per line each way, over the process's stdio (`run_stdio`) or any
line reader and writer (`serve`: an agent's session socket).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass
from io import TextIOWrapper
from typing import Any, Protocol

import anyio
import anyio.abc

from mnemosync.shim.tool_registry import Tools

log = logging.getLogger(__name__)

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The protocol versions answered as asked, oldest to newest (those the initialize handshake has)."""
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class LineWriter(Protocol):
    """Where answers go: an async text file (`anyio.wrap_file`)."""

    async def write(self, text: str) -> Any: ...

    async def flush(self) -> Any: ...


class McpError(Exception):
    """A request answered with a JSON-RPC error rather than a result."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def _bad_params() -> McpError:
    return McpError(INVALID_PARAMS, "Invalid request parameters", "")


@dataclass(frozen=True)
class Resource:
    """A resource read by a sync function returning its text."""

    uri: str
    name: str
    title: str | None
    description: str | None
    mime_type: str
    read: Callable[[], str]

    def wire(self) -> dict[str, Any]:
        listed = {"uri": self.uri, "name": self.name, "title": self.title, "description": self.description,
                  "mimeType": self.mime_type}
        return {k: v for k, v in listed.items() if v is not None}


class McpServer:
    """One MCP server, served to one client per `serve` (see the module docstring).

    Args:
        name, title, version: The `serverInfo` the client is told.
        instructions: The server instructions for the model.
        lifespan: An async context manager factory run around each connection (before the first request is read).
        experimental: Experimental capabilities to declare (e.g. `{"claude/channel": {}}`).
    """

    def __init__(self, name: str, *, title: str | None = None, version: str = "", instructions: str | None = None,
                 lifespan: Callable[[McpServer], AbstractAsyncContextManager[Any]] | None = None,
                 experimental: dict[str, dict[str, Any]] | None = None):
        self.name, self.title, self.version, self.instructions = name, title, version, instructions
        self.lifespan = lifespan
        self.experimental = experimental or {}
        self.tools = Tools()
        self.resources: dict[str, Resource] = {}
        self.initialized = False
        """True once the client has been answered `initialize` (notifications may then be sent)."""
        self._writer: LineWriter | None = None
        self._write_lock: anyio.Lock | None = None
        self._running: dict[Any, anyio.CancelScope] = {}

    def tool(self, **kwargs: Any) -> Callable[[Callable], Callable]:
        """Registers a tool (`Tools.tool`)."""
        return self.tools.tool(**kwargs)

    def resource(self, uri: str, *, name: str, title: str | None = None, description: str | None = None,
                 mime_type: str = "text/plain") -> Callable[[Callable[[], str]], Callable[[], str]]:
        """Registers the decorated function as the resource `uri` (it runs on a worker thread when read)."""
        def register(fn: Callable[[], str]) -> Callable[[], str]:
            self.resources[uri] = Resource(uri, name, title, description, mime_type, fn)
            return fn

        return register

    # -- serving -----------------------------------------------------------------------------------------------

    def run_stdio(self) -> None:
        """Serves the process's stdin and stdout until stdin closes. While it serves, fd 0 reads the null device
        and fd 1 is stderr, so stray output of native code (llama.cpp) cannot corrupt the stream."""
        with _claimed_stdio() as (stdin, stdout):
            anyio.run(self.serve, anyio.wrap_file(stdin), anyio.wrap_file(stdout))

    async def serve(self, reader: Any, writer: LineWriter, *, most: int = 32) -> None:
        """Serves one client: the lifespan, then every line `reader` (an async iterable of lines) gives, answered
        on `writer`, until it ends; at most `most` requests are read and not yet answered."""
        self._writer, self._write_lock = writer, anyio.Lock()
        slots = anyio.Semaphore(most)
        if self.lifespan is None:
            await self._read(reader, slots)
            return
        async with self.lifespan(self):
            await self._read(reader, slots)

    async def _read(self, reader: Any, slots: anyio.Semaphore) -> None:
        async with anyio.create_task_group() as tasks:
            async for line in reader:
                try:
                    message = json.loads(line)
                except ValueError:
                    log.warning("dropped a line that is not JSON")
                    continue
                if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                    log.warning("dropped a message that is not JSON-RPC 2.0")
                    continue
                method, ident = message.get("method"), message.get("id")
                params = message.get("params")
                if not isinstance(method, str):
                    continue  # an answer to a request of ours: we send none
                if ident is None:
                    self._notified(method, params)
                elif method == "initialize":  # answered before anything else is read
                    self.initialized = await self._answer(ident, self._initialize, params) or self.initialized
                else:
                    await slots.acquire()
                    scope = anyio.CancelScope()
                    self._running[ident] = scope
                    tasks.start_soon(self._request, ident, method, params, scope, slots)
            tasks.cancel_scope.cancel()

    async def _request(self, ident: Any, method: str, params: Any, scope: anyio.CancelScope,
                       slots: anyio.Semaphore) -> None:
        try:
            with scope:
                await self._answer(ident, self._dispatch, method, params)
        finally:
            self._running.pop(ident, None)
            slots.release()

    async def _answer(self, ident: Any, handle: Callable[..., Awaitable[Any]], *args: Any) -> bool:
        """Answers request `ident` with what `handle` returns or the error it raises; True for a result."""
        try:
            message = {"jsonrpc": "2.0", "id": ident, "result": await handle(*args)}
        except McpError as exc:
            error = {"code": exc.code, "message": exc.message}
            if exc.data is not None:
                error["data"] = exc.data
            message = {"jsonrpc": "2.0", "id": ident, "error": error}
        await self._send(message)
        return "result" in message

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._writer is not None and self._write_lock is not None
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        async with self._write_lock:
            await self._writer.write(text)
            await self._writer.flush()

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Sends the client a notification of the server's own."""
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def _notified(self, method: str, params: Any) -> None:
        if method == "notifications/initialized":
            self.initialized = True
        elif method == "notifications/cancelled" and isinstance(params, dict):
            scope = self._running.get(params.get("requestId"))
            if scope is not None:
                log.info("request %r cancelled: %s", params.get("requestId"), params.get("reason"))
                scope.cancel()

    # -- methods -----------------------------------------------------------------------------------------------

    async def _initialize(self, params: Any) -> dict[str, Any]:
        if not isinstance(params, dict) or not isinstance(params.get("protocolVersion"), str) or not isinstance(
                params.get("capabilities"), dict) or not isinstance(params.get("clientInfo"), dict):
            raise _bad_params()
        asked = params["protocolVersion"]
        capabilities: dict[str, Any] = {}
        if self.experimental:
            capabilities["experimental"] = self.experimental
        capabilities |= {"prompts": {"listChanged": False}, "resources": {"subscribe": False, "listChanged": False},
                         "tools": {"listChanged": False}}
        info = {"name": self.name, "title": self.title, "version": self.version}
        result = {"protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
                  "capabilities": capabilities, "serverInfo": {k: v for k, v in info.items() if v is not None}}
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return result

    async def _dispatch(self, method: str, params: Any) -> dict[str, Any]:
        handler = _METHODS.get(method)
        if handler is None:
            raise McpError(METHOD_NOT_FOUND, "Method not found", method)
        if params is None:
            params = {}
        if not isinstance(params, dict) or (not self.initialized and method != "ping"):
            raise _bad_params()
        return await handler(self, params)

    async def _ping(self, params: dict) -> dict[str, Any]:
        return {}

    async def _list_tools(self, params: dict) -> dict[str, Any]:
        return {"tools": self.tools.listed()}

    async def _call_tool(self, params: dict) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict | None):
            raise _bad_params()
        return await self.tools.call(name, arguments or {})

    async def _list_resources(self, params: dict) -> dict[str, Any]:
        return {"resources": [resource.wire() for resource in self.resources.values()]}

    async def _read_resource(self, params: dict) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise _bad_params()
        resource = self.resources.get(uri)
        if resource is None:
            raise McpError(INVALID_PARAMS, f"Unknown resource: {uri}", {"uri": uri})
        try:
            text = await anyio.to_thread.run_sync(resource.read)
        except Exception:
            log.exception("Resource %r raised an unexpected exception", uri)
            raise McpError(INTERNAL_ERROR, f"Error reading resource {uri}", {"uri": uri}) from None
        return {"contents": [{"uri": uri, "mimeType": resource.mime_type, "text": text}]}

    async def _list_templates(self, params: dict) -> dict[str, Any]:
        return {"resourceTemplates": []}

    async def _list_prompts(self, params: dict) -> dict[str, Any]:
        return {"prompts": []}

    async def _get_prompt(self, params: dict) -> dict[str, Any]:
        if not isinstance(params.get("name"), str):
            raise _bad_params()
        raise McpError(INVALID_PARAMS, f"Unknown prompt: {params['name']}")


_METHODS: dict[str, Callable[[McpServer, dict], Awaitable[dict[str, Any]]]] = {
    "ping": McpServer._ping, "tools/list": McpServer._list_tools, "tools/call": McpServer._call_tool,
    "resources/list": McpServer._list_resources, "resources/read": McpServer._read_resource,
    "resources/templates/list": McpServer._list_templates, "prompts/list": McpServer._list_prompts,
    "prompts/get": McpServer._get_prompt,
}


@contextmanager
def _claimed_stdio() -> Iterator[tuple[TextIOWrapper, TextIOWrapper]]:
    """The protocol's own copies of fd 0 and 1 as UTF-8 text, with fd 0 pointed at the null device and fd 1 at
    stderr until the block ends."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    stdin = TextIOWrapper(os.fdopen(wire_in, "rb", closefd=False), encoding="utf-8", errors="replace")
    stdout = TextIOWrapper(os.fdopen(wire_out, "wb", closefd=False), encoding="utf-8", newline="\n")
    try:
        yield stdin, stdout
    finally:
        stdout.close()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)
