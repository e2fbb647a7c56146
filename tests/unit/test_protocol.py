"""`mnemosync.shim.protocol`: what the shim's MCP server does with requests over time (cancellation, pacing, the
handshake); `tests/system/test_mcp_protocol.py` pins its answers against the MCP SDK's."""

from __future__ import annotations

import json
import threading
from typing import Annotated

import anyio
from pydantic import BaseModel, Field

from mnemosync.shim.protocol import McpServer
from mnemosync.shim.tool_registry import ToolResult

INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


class Waited(BaseModel):
    waited: bool


class Lines:
    """A client's side of one connection: lines in, answers out."""

    def __init__(self) -> None:
        self.send, self._receive = anyio.create_memory_object_stream[str](100)
        self.out: list[dict] = []
        self.arrived = anyio.Event()

    async def __aiter__(self):
        async with self._receive:
            async for line in self._receive:
                yield line

    async def write(self, text: str) -> None:
        self.out.append(json.loads(text))
        self.arrived.set()

    async def flush(self) -> None:
        pass

    async def request(self, ident, method: str, params: dict | None = None) -> None:
        await self.send.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}))

    async def notify(self, method: str, params: dict) -> None:
        await self.send.send(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    async def answer(self, ident) -> dict:
        with anyio.fail_after(10):
            while True:
                for message in self.out:
                    if message.get("id") == ident:
                        return message
                self.arrived = anyio.Event()
                await self.arrived.wait()


def server_with_a_waiting_tool(release: threading.Event) -> McpServer:
    server = McpServer("t", version="1")

    @server.tool(name="wait", description="Waits until released.")
    def wait(seconds: Annotated[float, Field(gt=0)] = 10) -> Annotated[ToolResult, Waited]:
        released = release.wait(seconds)
        return ToolResult(json.dumps({"waited": released}), structured={"waited": released})

    return server


def test_a_cancelled_request_is_never_answered_and_frees_its_place_for_the_next():
    anyio.run(_a_cancelled_request_is_never_answered_and_frees_its_place_for_the_next)


async def _a_cancelled_request_is_never_answered_and_frees_its_place_for_the_next():
    release = threading.Event()
    server, client = server_with_a_waiting_tool(release), Lines()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: server.serve(client, client, most=2))
        await client.request(0, "initialize", INIT)
        await client.answer(0)
        await client.request(1, "tools/call", {"name": "wait", "arguments": {}})
        await client.notify("notifications/cancelled", {"requestId": 1, "reason": "changed my mind"})
        await client.request(2, "tools/call", {"name": "wait", "arguments": {"seconds": 0.01}})
        await client.request(3, "ping")  # read once request 1 or 2 is over: at most two at a time
        assert (await client.answer(2))["result"]["structuredContent"] == {"waited": False}
        release.set()
        assert (await client.answer(3))["result"] == {}
        client.send.close()
    assert sorted(m["id"] for m in client.out) == [0, 2, 3]


def test_a_request_before_initialize_is_refused_but_ping_and_unknown_methods_are_answered():
    anyio.run(_a_request_before_initialize_is_refused_but_ping_and_unknown_methods_are_answered)


async def _a_request_before_initialize_is_refused_but_ping_and_unknown_methods_are_answered():
    server, client = server_with_a_waiting_tool(threading.Event()), Lines()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: server.serve(client, client))
        await client.request(1, "tools/list")
        await client.request(2, "ping")
        await client.request(3, "no/such")
        assert (await client.answer(1))["error"] == {"code": -32602, "message": "Invalid request parameters",
                                                     "data": ""}
        assert (await client.answer(2))["result"] == {}
        assert (await client.answer(3))["error"]["code"] == -32601
        assert not server.initialized
        client.send.close()


def test_a_tool_result_that_breaks_its_output_schema_is_a_tool_error_not_a_wrong_answer():
    anyio.run(_a_tool_result_that_breaks_its_output_schema_is_a_tool_error_not_a_wrong_answer)


async def _a_tool_result_that_breaks_its_output_schema_is_a_tool_error_not_a_wrong_answer():
    server, client = McpServer("t"), Lines()

    @server.tool(name="broken", description="Returns what its schema forbids.")
    def broken() -> Annotated[ToolResult, Waited]:
        return ToolResult("{}", structured={"waited": "maybe"})

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: server.serve(client, client))
        await client.request(0, "initialize", INIT)
        await client.request(1, "tools/call", {"name": "broken"})
        assert (await client.answer(1))["result"] == {
            "content": [{"type": "text", "text": "Error executing tool broken"}], "isError": True}
        client.send.close()
