"""The checked-in gRPC stubs are exactly what proto/generate.py makes from proto/executor.proto."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUBS = ("executor_pb2.py", "executor_pb2.pyi", "executor_pb2_grpc.py")


def test_checked_in_stubs_match_the_proto(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for name in STUBS:
        fresh = (tmp_path / "proto" / name).read_bytes()
        assert fresh == (ROOT / "proto" / name).read_bytes(), f"proto/{name} is stale: run proto/generate.py"


def test_the_proto_and_the_code_agree_on_the_protocol_version() -> None:
    from tools.executor import PROTOCOL_VERSION

    text = (ROOT / "proto" / "executor.proto").read_text()
    assert re.search(r"core-executor-rpc:\s*(\d+)", text).group(1) == str(PROTOCOL_VERSION)  # type: ignore[union-attr]
    assert f"package lens.executor.v{PROTOCOL_VERSION};" in text
