"""`mnemosync init`: set a project up for Claude Code, by hand-written files or by installing the plugin.

Without `--plugin` it writes, merging into what is there and touching no
other entry:

* `.mcp.json`: the `mnemosync` server entry (this installation's `mnemosync-mcp`),
  whose `args` carry what the team shares and the server needs to connect
  (`--server`, `--insecure`, `--tls-server-name`, `--scope`): args always reach
  the server, while Claude Code does not reliably pass settings' `env` to it
  (anthropics/claude-code#36161);
* `.claude/settings.json` (`--local`: `.claude/settings.local.json`): `env` with
  the same shared settings and `MNEMOSYNC_SCOPE=project:<folder name>`, which
  the hooks read, the four hooks (SessionStart, UserPromptSubmit, PreCompact,
  SessionEnd) running this installation's `mnemosync hook …`, and `mnemosync`
  in `enabledMcpjsonServers`, which approves the `.mcp.json` entry (Claude Code
  otherwise lists it as "Pending approval" until someone approves it in a
  session; it still asks once whether to trust the folder);
* `.claude/settings.local.json`, always: `env` with what is one person's (the
  agent id, the certificate folder, the cache, the model, the settings file),
  so a teammate who clones the project does not become that person. It is
  kept out of git (`.git/info/exclude`) when the project is a repository's
  root; `mnemosync-mcp` and the hooks read it themselves when Claude Code
  does not pass its `env` (`mnemosync.shim.project_settings`).

With `--plugin` it adds this checkout as a plugin marketplace and installs
the `mnemosync` plugin with the settings given as its options, through the
`claude` command line. Either way it records this installation's command
folder in `<data home>/install-bin`, where the plugin's launcher looks.

It prints what it did to each file; run again, it changes nothing and says so.
A file that is not valid JSON is left alone and named in the error.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import click

from mnemosync.agent.cli_options import connection_options
from mnemosync.kernel.errors import FailedPrecondition, SettingsError
from mnemosync.kernel.settings_loading import default_data_home
from mnemosync.shim.config import project_scope

SERVER_NAME = "mnemosync"
"""The server's name in `.mcp.json` (tools appear as `mcp__mnemosync__…`)."""

HOOKS = {
    "SessionStart": ("session-start", "startup|resume|clear|compact", 30),
    "UserPromptSubmit": ("prompt", None, 5),
    "PreCompact": ("precompact", None, 10),
    "SessionEnd": ("session-end", None, 5),
}
"""Claude Code event -> (`mnemosync hook` command, matcher, timeout in seconds)."""
ENV_NAMES = {"server": "MNEMOSYNC_SERVER", "agent_id": "MNEMOSYNC_AGENT_ID", "insecure": "MNEMOSYNC_INSECURE",
             "cert_dir": "MNEMOSYNC_CERT_DIR", "tls_server_name": "MNEMOSYNC_TLS_SERVER_NAME",
             "cache_dir": "MNEMOSYNC_CACHE_DIR", "embed_model": "MNEMOSYNC_EMBED_MODEL",
             "config_file": "MNEMOSYNC_CONFIG"}
SHARED = ("server", "insecure", "tls_server_name")
"""The connection settings a team shares (the server and how to reach it); the others are one person's."""
LOCAL_SETTINGS = ".claude/settings.local.json"
PLUGIN = "mnemosync@mnemosync"
PLUGIN_OPTIONS = {"server": "server", "agent_id": "agent_id", "insecure": "insecure", "cert_dir": "cert_dir"}


def installation_bin() -> Path:
    """The folder holding this installation's `mnemosync` and `mnemosync-mcp` commands.

    Raises:
        FailedPrecondition: they cannot be found (not installed with its console scripts).
    """
    for folder in (Path(sys.executable).parent, Path(sys.argv[0]).resolve().parent):
        if (folder / "mnemosync").is_file() and (folder / "mnemosync-mcp").is_file():
            return folder.absolute()
    found = shutil.which("mnemosync-mcp")
    if found:
        return Path(found).parent.absolute()
    raise FailedPrecondition("cannot find the mnemosync-mcp command of this installation; run ops/bootstrap.sh "
                             "in the checkout, or install mnemosync with its commands")


def record_installation(bin_dir: Path, data_home: Path) -> str:
    """Writes `bin_dir` to `<data_home>/install-bin`; returns what it did."""
    path = data_home / "install-bin"
    text = f"{bin_dir}\n"
    if path.is_file() and path.read_text() == text:
        return f"unchanged {path}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return f"recorded the installation {bin_dir} in {path}"


def _load(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text() or "{}")
    except ValueError as exc:
        raise FailedPrecondition(f"{path} is not valid JSON ({exc}); fix it or move it away, then run "
                                 "mnemosync init again") from None
    if not isinstance(data, dict):
        raise FailedPrecondition(f"{path} does not hold a JSON object; fix it or move it away")
    return data


def _write(path: Path, before: dict, after: dict, what: list[str]) -> str:
    if before == after and path.exists():
        return f"unchanged {path}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(after, indent=2) + "\n")
    return f"{'updated' if before else 'created'} {path}: {'; '.join(what)}"


def mcp_entry(bin_dir: Path, args: list[str] | None = None) -> dict:
    """The `.mcp.json` server entry, with `args` (the shared connection flags and the scope)."""
    return {"type": "stdio", "command": str(bin_dir / "mnemosync-mcp"), "args": list(args or []), "env": {}}


def shared_args(given: dict, scope: str) -> list[str]:
    """The flags of what the team shares (`SHARED`) and the scope, for the server entry's args."""
    args = []
    for name in SHARED:
        value = given.get(name)
        if value is True or value is False:
            args.append(f"--{'' if value else 'no-'}{name.replace('_', '-')}")
        elif value is not None:
            args += [f"--{name.replace('_', '-')}", str(value)]
    return [*args, "--scope", scope]


def exclude_from_git(project: Path, relative: str) -> str | None:
    """Keeps `relative` out of git in a repository rooted at `project` (`.git/info/exclude`, which is not checked
    in either); returns what it did, or None when there is nothing to do."""
    info = project / ".git" / "info"
    if not (project / ".git").is_dir():
        return None
    exclude = info / "exclude"
    line = f"/{relative}"
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    if line in lines:
        return None
    info.mkdir(parents=True, exist_ok=True)
    exclude.write_text("".join(f"{x}\n" for x in [*lines, line]))
    return f"kept {relative} out of git ({exclude})"


def hook_entry(bin_dir: Path, command: str, matcher: str | None, timeout: int) -> dict:
    """One hook group of `.claude/settings.json`."""
    group: dict = {"hooks": [{"type": "command", "command": f"{shlex.quote(str(bin_dir / 'mnemosync'))} hook {command}",
                              "timeout": timeout}]}
    if matcher:
        group = {"matcher": matcher, **group}
    return group


def _ours(group: object, command: str) -> bool:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return isinstance(hooks, list) and any(
        isinstance(h, dict) and str(h.get("command", "")).split(" hook ")[-1].strip() == command
        and "mnemosync" in str(h.get("command", "")) for h in hooks)


def update_mcp_json(project: Path, bin_dir: Path, args: list[str] | None = None) -> str:
    """Adds or updates the `mnemosync` entry of `project/.mcp.json` (with `args`); returns what it did."""
    path = project / ".mcp.json"
    before = _load(path)
    after = json.loads(json.dumps(before))
    servers = after.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise FailedPrecondition(f"{path}: mcpServers is not an object; fix it or move the file away")
    entry = mcp_entry(bin_dir, args)
    what = [f"added server {SERVER_NAME}" if SERVER_NAME not in servers else f"updated server {SERVER_NAME}"]
    servers[SERVER_NAME] = entry
    return _write(path, before, after, what)


def _set_env(path: Path, after: dict, env: dict[str, str], what: list[str], moved: Iterable[str] = ()) -> None:
    current_env = after.setdefault("env", {})
    if not isinstance(current_env, dict):
        raise FailedPrecondition(f"{path}: env is not an object; fix it or move the file away")
    changed = sorted(k for k, v in env.items() if current_env.get(k) != v)
    current_env.update(env)
    if changed:
        what.append(f"env {', '.join(changed)}")
    gone = sorted(k for k in moved if current_env.pop(k, None) is not None)
    if gone:
        what.append(f"moved {', '.join(gone)} to {LOCAL_SETTINGS}")


def update_env(path: Path, env: dict[str, str]) -> str:
    """Sets `env` in a Claude Code settings file, touching nothing else; returns what it did."""
    before = _load(path)
    after = json.loads(json.dumps(before))
    what: list[str] = []
    _set_env(path, after, env, what)
    return _write(path, before, after, what)


def update_settings(path: Path, bin_dir: Path, env: dict[str, str], moved: Iterable[str] = ()) -> str:
    """Sets `env`, the approval of the `.mcp.json` server and the four mnemosync hooks in a Claude Code settings
    file, and removes the `moved` variables from its `env` (an earlier init's personal ones); returns what it
    did."""
    before = _load(path)
    after = json.loads(json.dumps(before))
    what: list[str] = []
    _set_env(path, after, env, what, moved)
    approved = after.setdefault("enabledMcpjsonServers", [])
    if not isinstance(approved, list):
        raise FailedPrecondition(f"{path}: enabledMcpjsonServers is not a list; fix it or move the file away")
    if SERVER_NAME not in approved:
        approved.append(SERVER_NAME)
        what.append(f"approved the {SERVER_NAME} server of .mcp.json")
    hooks = after.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise FailedPrecondition(f"{path}: hooks is not an object; fix it or move the file away")
    for event, (command, matcher, timeout) in HOOKS.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise FailedPrecondition(f"{path}: hooks.{event} is not a list; fix it or move the file away")
        wanted = hook_entry(bin_dir, command, matcher, timeout)
        kept = [g for g in groups if not _ours(g, command)]
        if kept + [wanted] != groups:
            what.append(f"hook {event}")
        hooks[event] = kept + [wanted]
    return _write(path, before, after, what)


def plugin_options_line(checkout: Path, given: dict[str, str]) -> str:
    """What to tell about the plugin's options: those set, and the rest, which are optional, with their defaults
    (Claude Code calls them "not yet set", which reads like something is missing)."""
    manifest = json.loads((checkout / "mcp_shim" / "claude_plugin" / ".claude-plugin" / "plugin.json").read_text())
    rest = [f"{key} ({json.dumps(option.get('default', ''))})" for key, option in manifest["userConfig"].items()
            if key not in given]
    return (f"plugin options set: {', '.join(sorted(given)) or 'none'}; "
            + (f"optional, left at their defaults (Claude Code lists them as not yet set): {', '.join(rest)}"
               if rest else "every option is set"))


def install_plugin(checkout: Path, project: Path, scope: str, options: dict[str, str], *,
                   claude: str = "claude") -> list[str]:
    """Adds `checkout` as a marketplace and installs the plugin for `project` with `options` (`claude plugin …`).

    Raises:
        FailedPrecondition: no `claude` command, no marketplace in the checkout, or the command failed.
    """
    if shutil.which(claude) is None:
        raise FailedPrecondition(f"no `{claude}` command on PATH: install Claude Code, or run mnemosync init "
                                 "without --plugin to write the project's files instead")
    if not (checkout / ".claude-plugin" / "marketplace.json").is_file():
        raise FailedPrecondition(f"{checkout} holds no .claude-plugin/marketplace.json: run mnemosync init "
                                 "--plugin from a mnemosync checkout, or add the marketplace by hand")
    done = []
    for command in ([claude, "plugin", "marketplace", "add", str(checkout)],
                    [claude, "plugin", "install", PLUGIN, "--scope", scope,
                     *[a for k, v in options.items() for a in ("--config", f"{k}={v}")]]):
        run = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=project)
        if run.returncode != 0:
            raise FailedPrecondition(f"`{' '.join(command[:4])}` failed: {(run.stderr or run.stdout).strip()}")
        said = [line for line in run.stdout.strip().splitlines() if "not yet set" not in line]
        done.append(f"{' '.join(command[1:4])}: {said[-1] if said else 'ok'}")
    return done


@click.command()
@connection_options
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path), default=".")
@click.option("--scope", help="Scope of the project's memories [default project:<name of DIRECTORY>].")
@click.option("--local", is_flag=True, help="Write settings and hooks to .claude/settings.local.json (not checked "
                                            "in) instead of .claude/settings.json.")
@click.option("--plugin", is_flag=True, help="Install the mnemosync Claude Code plugin (through the claude "
                                             "command) instead of writing the project's files.")
def init(directory, scope, local, plugin, connection):
    """Set a project up for Claude Code: the MCP server, the hooks, the scope.

    Writes .mcp.json and .claude/settings.json in DIRECTORY (default: here),
    or with --plugin installs the plugin. Connection options given here
    become the project's settings: the server and how to reach it are the
    team's (in the server entry's args and settings.json), the agent id,
    certificate folder, cache and model one person's (always in
    .claude/settings.local.json, kept out of git). Safe to run again.

    \b
    Examples:
      mnemosync init --insecure --agent-id alice
      mnemosync init ~/src/web --cert-dir ~/certs/alice --server memory.internal:50051 --local
      mnemosync init --plugin --insecure
    """
    project = directory.resolve()
    chosen = scope or project_scope(project)
    if not chosen:
        raise SettingsError(f"{project} has no name to make a project scope from; give --scope")
    bin_dir = installation_bin()
    given = {k: (str(Path(v).expanduser().resolve()) if isinstance(v, Path) else v) for k, v in connection.items()
             if v is not None and k in ENV_NAMES}
    click.echo(f"project {project}: scope {chosen}")
    click.echo(record_installation(bin_dir, Path(os.environ.get("MNEMOSYNC_DATA_HOME") or default_data_home())))
    if plugin:
        options = {PLUGIN_OPTIONS[k]: ("true" if v is True else str(v)) for k, v in given.items()
                   if k in PLUGIN_OPTIONS and v is not False}
        if scope:
            options["scope"] = scope
        checkout = Path(__file__).resolve().parents[1]
        for line in install_plugin(checkout, project, "local" if local else "project", options):
            click.echo(line)
        click.echo(plugin_options_line(checkout, options))
        return
    env = {ENV_NAMES[k]: ("1" if v is True else "0" if v is False else str(v)) for k, v in given.items()}
    shared = {name: value for name, value in env.items() if name in {ENV_NAMES[k] for k in SHARED}}
    personal = {name: value for name, value in env.items() if name not in shared}
    click.echo(update_mcp_json(project, bin_dir, shared_args(given, chosen)))
    settings = project / (LOCAL_SETTINGS if local else ".claude/settings.json")
    if local:
        click.echo(update_settings(settings, bin_dir, {**shared, "MNEMOSYNC_SCOPE": chosen, **personal}))
    else:  # the personal part first: an earlier init's copy leaves the checked-in file only once it is there
        if personal:
            click.echo(update_env(project / LOCAL_SETTINGS, personal))
        click.echo(update_settings(settings, bin_dir, {**shared, "MNEMOSYNC_SCOPE": chosen}, moved=personal))
    if personal or local:
        excluded = exclude_from_git(project, LOCAL_SETTINGS)
        if excluded:
            click.echo(excluded)
