"""Generated Protobuf code for proto/helios/v1 (host side). Regenerate with `make proto`; never edit."""

from helios.proto import contract_pb2, core_pb2, manifest_pb2, program_pb2

__all__ = ["contract_pb2", "core_pb2", "manifest_pb2", "program_pb2"]
