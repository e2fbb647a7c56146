"""`pip install .` into an environment that is not ours: one `mnemosync` namespace, nothing else claimed.

The package is built from a copy of the checkout's files (as a user's `pip install .` would) and installed with
`--no-deps` into a fresh virtual environment that already has a package of its own named `server`; the
dependencies come from this checkout's environment through a path file, so the test needs no download but the
build backend (pip's cache or the registry).
"""

from __future__ import annotations

import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

from ops.faults.run import copy_tree

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib.util, server
assert server.WHO == "someone else's server", server.__file__
for name in ("agent_client", "mcp_shim"):
    assert importlib.util.find_spec(name) is None, name
from mnemosync import AgentClient, ClientSettings, __version__
import mnemosync.server.service, mnemosync.shim.app, mnemosync.kernel.entry, mnemosync.cli
assert AgentClient.__module__ == "mnemosync.agent.client"
print("ok", __version__)
"""


@pytest.fixture(scope="module")
def foreign_environment(tmp_path_factory) -> Path:
    """A new virtual environment with someone else's `server` package and mnemosync installed by `pip install .`."""
    work = tmp_path_factory.mktemp("install")
    target = work / "venv"
    venv.EnvBuilder(with_pip=True).create(target)
    python = target / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "server").mkdir()
    (site / "server" / "__init__.py").write_text("WHO = \"someone else's server\"\n")
    (site / "our-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    source = work / "source"
    copy_tree(ROOT, source)
    done = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q",
                           str(source)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def test_pip_install_into_an_environment_with_its_own_server_package_leaves_that_package_working(
        foreign_environment, tmp_path):
    done = subprocess.run([foreign_environment / "bin" / "python", "-c", PROBE], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")


def test_the_installed_console_scripts_run_from_the_namespace(foreign_environment, tmp_path):
    for script in ("mnemosync", "mnemosync-mcp"):
        done = subprocess.run([foreign_environment / "bin" / script, "--help"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "Example" in done.stdout


def test_the_installed_wheel_holds_only_the_namespace_and_the_dashboards_files(foreign_environment):
    site = subprocess.run([foreign_environment / "bin" / "python", "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    record = next(Path(site).glob("mnemosync-*.dist-info")) / "RECORD"
    tops = {line.split("/", 1)[0] for line in record.read_text().splitlines() if "/" in line
            and not line.startswith("../")}  # the console scripts, in bin/
    assert {t for t in tops if not t.endswith(".dist-info")} == {"mnemosync"}
    files = record.read_text()
    assert "mnemosync/agent/dashboard/templates/" in files and "mnemosync/v1/memory.proto" in files


def test_the_plugins_launcher_starts_a_wheel_installs_prompt_hook_without_site(foreign_environment, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MNEMOSYNC_DATA_HOME": str(tmp_path / "data"),
           "CLAUDE_PLUGIN_OPTION_INSTALL_DIR": str(foreign_environment / "bin"), "MNEMOSYNC_SERVER": "127.0.0.1:9",
           "MNEMOSYNC_INSECURE": "1", "MNEMOSYNC_RECALL_START_AGENT": "0", "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run([ROOT / "mcp_shim" / "claude_plugin" / "bin" / "mnemosync-plugin", "hook", "prompt"],
                          input='{"prompt": "how do we deploy to production?", "session_id": "s"}', cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "")
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "mnemosync.agent.local_socket" in imported and "site" not in imported
