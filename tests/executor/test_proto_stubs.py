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


def test_the_send_order_is_added_to_the_requests_without_moving_a_field() -> None:
    # Additive within protocol 8: the fields a Core or an executor built before it knows keep
    # their numbers and types, and its requests (no `order`) read as having none.
    from google.protobuf.descriptor import FieldDescriptor as F

    from proto import executor_pb2 as pb

    def fields(message: type) -> list[tuple[str, int, int]]:
        return [(f.name, f.number, f.type) for f in message.DESCRIPTOR.fields]

    assert fields(pb.ToolRequest) == [("tool", 1, F.TYPE_STRING), ("call_id", 2, F.TYPE_STRING),
                                      ("arguments_json", 3, F.TYPE_STRING), ("rerun", 4, F.TYPE_BOOL),
                                      ("order", 5, F.TYPE_MESSAGE)]
    assert fields(pb.StopRequest) == [("run_id", 1, F.TYPE_STRING), ("order", 2, F.TYPE_MESSAGE)]
    assert fields(pb.SendOrder) == [("epoch", 1, F.TYPE_FIXED64), ("seq", 2, F.TYPE_UINT64)]
    older = pb.ToolRequest(tool="edit_file", call_id="s:c", arguments_json="{}", rerun=True).SerializeToString()
    assert not pb.ToolRequest.FromString(older).HasField("order")
    assert not pb.StopRequest.FromString(pb.StopRequest(run_id="s:c").SerializeToString()).HasField("order")
