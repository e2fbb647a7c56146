"""The MCP shim: one stdio MCP server per agent session, wrapping one `AgentClient`.

`mnemosync-mcp` (`__main__`) serves the tools (`tools_*`), the core-memories
resource (`core`) and the server instructions (`app`); `mnemosync hook …`
(`hook_cli`) prints what Claude Code hooks inject. The shim only calls
`agent_client` and reads the agent's local cache (`views`); it never talks to
the server's store directly.
"""

if __name__ != "mnemosync.shim":  # the folder is mapped into the namespace; it is not a package of its own
    raise ImportError(f"import mnemosync.shim, not {__name__}: mnemosync installs one namespace (see pyproject.toml)")
