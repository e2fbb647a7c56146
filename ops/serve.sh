#!/usr/bin/env bash
# The main job: set up if needed, then run the server on the embedded SQLite
# default (data in ~/.local/share/mnemosync/server, 127.0.0.1:50051, plain text
# on loopback for development). Extra arguments go to `mnemosync serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
ops/bootstrap.sh
exec .venv/bin/mnemosync serve --insecure "$@"
