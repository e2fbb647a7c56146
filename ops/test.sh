#!/usr/bin/env bash
# The whole test suite: set up if needed, check the generated stubs and lint,
# then run pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
ops/bootstrap.sh --for-tests
echo "==> generated gRPC stubs are current" >&2
.venv/bin/python ops/codegen.py --check
echo "==> ruff" >&2
.venv/bin/ruff check .
echo "==> mypy" >&2
.venv/bin/python -m ops.typecheck
echo "==> pytest" >&2
status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here" >&2
    exit 1
fi
exit "$status"
