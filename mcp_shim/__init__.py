"""The MCP shim: one stdio MCP server per agent session, wrapping one `AgentClient`.

`mnemosync-mcp` (`__main__`) serves the tools (`tools_*`), the core-memories
resource (`core`) and the server instructions (`app`); `mnemosync hook …`
(`hook_cli`) prints what Claude Code hooks inject. The shim only calls
`agent_client` and reads the agent's local cache (`views`); it never talks to
the server's store directly.
"""
