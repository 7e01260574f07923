from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HelloRequest(_message.Message):
    __slots__ = ("protocol_version",)
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    def __init__(self, protocol_version: _Optional[int] = ...) -> None: ...

class HelloReply(_message.Message):
    __slots__ = ("protocol_version", "executor_version", "workspace_name")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_NAME_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    executor_version: str
    workspace_name: str
    def __init__(self, protocol_version: _Optional[int] = ..., executor_version: _Optional[str] = ..., workspace_name: _Optional[str] = ...) -> None: ...

class ToolRequest(_message.Message):
    __slots__ = ("tool", "call_id", "arguments_json", "rerun", "order")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    RERUN_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    tool: str
    call_id: str
    arguments_json: str
    rerun: bool
    order: SendOrder
    def __init__(self, tool: _Optional[str] = ..., call_id: _Optional[str] = ..., arguments_json: _Optional[str] = ..., rerun: _Optional[bool] = ..., order: _Optional[_Union[SendOrder, _Mapping]] = ...) -> None: ...

class SendOrder(_message.Message):
    __slots__ = ("epoch", "seq")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    seq: int
    def __init__(self, epoch: _Optional[int] = ..., seq: _Optional[int] = ...) -> None: ...

class ToolReply(_message.Message):
    __slots__ = ("ok", "error_code", "error_message", "result_json", "has_before", "before", "after", "data", "mime", "written_path")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    HAS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_PATH_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error_code: str
    error_message: str
    result_json: str
    has_before: bool
    before: bytes
    after: bytes
    data: bytes
    mime: str
    written_path: bytes
    def __init__(self, ok: _Optional[bool] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., result_json: _Optional[str] = ..., has_before: _Optional[bool] = ..., before: _Optional[bytes] = ..., after: _Optional[bytes] = ..., data: _Optional[bytes] = ..., mime: _Optional[str] = ..., written_path: _Optional[bytes] = ...) -> None: ...

class CommandRequest(_message.Message):
    __slots__ = ("command", "timeout_ms", "max_output_bytes", "cwd", "cwd_leads_to", "run_id")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    CWD_LEADS_TO_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    command: str
    timeout_ms: int
    max_output_bytes: int
    cwd: str
    cwd_leads_to: str
    run_id: str
    def __init__(self, command: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., max_output_bytes: _Optional[int] = ..., cwd: _Optional[str] = ..., cwd_leads_to: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class CommandEvent(_message.Message):
    __slots__ = ("stdout", "stderr", "exit")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    exit: CommandExit
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[CommandExit, _Mapping]] = ...) -> None: ...

class CommandExit(_message.Message):
    __slots__ = ("exit_code", "timed_out", "truncated", "duration_ms", "stopped")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    timed_out: bool
    truncated: bool
    duration_ms: int
    stopped: bool
    def __init__(self, exit_code: _Optional[int] = ..., timed_out: _Optional[bool] = ..., truncated: _Optional[bool] = ..., duration_ms: _Optional[int] = ..., stopped: _Optional[bool] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("run_id", "order")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    order: SendOrder
    def __init__(self, run_id: _Optional[str] = ..., order: _Optional[_Union[SendOrder, _Mapping]] = ...) -> None: ...

class StopReply(_message.Message):
    __slots__ = ("found", "ended", "exit", "call")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    found: bool
    ended: bool
    exit: CommandExit
    call: ToolReply
    def __init__(self, found: _Optional[bool] = ..., ended: _Optional[bool] = ..., exit: _Optional[_Union[CommandExit, _Mapping]] = ..., call: _Optional[_Union[ToolReply, _Mapping]] = ...) -> None: ...

class ProbeRequest(_message.Message):
    __slots__ = ("path", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    sha256: str
    def __init__(self, path: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class ProbeReply(_message.Message):
    __slots__ = ("seen",)
    SEEN_FIELD_NUMBER: _ClassVar[int]
    seen: bool
    def __init__(self, seen: _Optional[bool] = ...) -> None: ...
