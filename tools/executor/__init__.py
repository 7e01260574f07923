"""The executor process: a gRPC server (proto/executor.proto) in front of one workspace."""

PROTOCOL_VERSION = 8
