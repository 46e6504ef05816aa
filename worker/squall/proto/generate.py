"""Regenerate ``squall_pb2.py`` from ``squall.proto``: ``python -m squall.proto.generate``.

The generated module is checked in; ``tests/test_proto.py`` fails when it is stale.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent


def generate(out_dir: Path) -> Path:
    from grpc_tools import protoc

    code = protoc.main(["grpc_tools.protoc", f"-I{HERE}", f"--python_out={out_dir}", str(HERE / "squall.proto")])
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    return out_dir / "squall_pb2.py"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp)).read_text()
    (HERE / "squall_pb2.py").write_text(fresh)
    print(f"wrote {HERE / 'squall_pb2.py'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
