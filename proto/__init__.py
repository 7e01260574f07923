"""gRPC contract between Core and executors (generated stubs live beside the .proto)."""
