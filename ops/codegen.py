"""Regenerates the Python stubs from proto/mnemosync/v1/*.proto.

The generated `_pb2.py`, `_pb2_grpc.py` and `.pyi` files are committed so that
installing the project needs no protoc. CI runs `python ops/codegen.py --check`
and fails when the committed stubs differ from what the .proto files produce.

Usage:
    python ops/codegen.py          # rewrite the stubs
    python ops/codegen.py --check  # exit 1 if they are stale
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE_DIR = PROTO_ROOT / "mnemosync" / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def _generate(out_dir: Path) -> list[Path]:
    protos = sorted(PACKAGE_DIR.glob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(PROTO_ROOT)) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    generated_dir = out_dir / "mnemosync" / "v1"
    return sorted(p for p in generated_dir.iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the stubs are stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generated = _generate(Path(tmp))
        existing = sorted(p for p in PACKAGE_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES))
        if args.check:
            stale = [
                g.name
                for g in generated
                if not (PACKAGE_DIR / g.name).exists()
                or not filecmp.cmp(g, PACKAGE_DIR / g.name, shallow=False)
            ]
            extra = sorted({e.name for e in existing} - {g.name for g in generated})
            if stale or extra:
                print(f"stale generated stubs: {stale + extra}; run: python ops/codegen.py")
                return 1
            print("generated stubs are up to date")
            return 0
        for path in existing:
            path.unlink()
        for g in generated:
            shutil.copyfile(g, PACKAGE_DIR / g.name)
            print(f"wrote {(PACKAGE_DIR / g.name).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
