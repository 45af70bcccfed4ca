"""The generated code in helios/proto matches proto/helios/v1 (regenerate with `make proto`)."""

from __future__ import annotations

from helios.proto import generate


def test_generated_protobuf_code_is_not_stale():
    generated = generate.generate()
    stale = [name for name, text in generated.items() if (generate.OUT_DIR / name).read_text() != text]
    assert not stale, f"stale generated code: {stale}; run `make proto`"


def test_every_enum_has_an_unspecified_zero_value():
    from helios.proto import contract_pb2, core_pb2, manifest_pb2, program_pb2

    for module in (contract_pb2, core_pb2, manifest_pb2, program_pb2):
        for enum in module.DESCRIPTOR.enum_types_by_name.values():
            zero = enum.values_by_number.get(0)
            assert zero is not None and zero.name.endswith("UNSPECIFIED"), f"{enum.full_name} has no UNSPECIFIED 0"
