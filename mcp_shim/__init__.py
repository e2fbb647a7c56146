"""The MCP shim: Claude Code's sessions and hooks in front of the machine's one local agent.

`mnemosync-mcp` (`__main__`) relays a session's stdio (`relay`, standard library only) to
`mnemosync agent` (`agent_cli`), which serves every session (`agent_sessions`) with the tools
(`tools_*`), the core-memories resource (`core_memories`) and the server instructions (`app`)
over one `AgentClient`; `mnemosync hook …` (`hook_cli`) prints what Claude Code hooks inject.
The shim only calls `mnemosync.agent`; it never talks to the server's store directly.
"""

if __name__ != "mnemosync.shim":  # the folder is mapped into the namespace; it is not a package of its own
    raise ImportError(f"import mnemosync.shim, not {__name__}: mnemosync installs one namespace (see pyproject.toml)")
