"""The operator registry: every operator has a spec, a reference implementation whose signature
matches the spec, and a section in docs/operators.md (production lowering joins this test in the
production issue). The operator set and the reference import with torch and triton absent."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from helios.program import OPERATOR_SET_VERSION, OPERATORS, SUPPORTED_OPERATOR_SET_VERSIONS
from helios.reference.operators import REFERENCE_OPERATORS

ROOT = Path(__file__).resolve().parents[1]
LLAMA_FAMILY_NEEDS = {
    "embedding", "rms_norm", "matmul", "add", "mul", "gated_activation", "rotary", "head_rms_norm",
    "paged_cache_write", "paged_attention", "last_row_gather", "logits", "sample", "argmax",
}


def test_the_operator_set_covers_what_the_first_recipe_needs():
    assert LLAMA_FAMILY_NEEDS <= set(OPERATORS)
    assert OPERATOR_SET_VERSION in SUPPORTED_OPERATOR_SET_VERSIONS


def test_every_operator_has_a_spec_and_a_reference_implementation():
    assert set(OPERATORS) == set(REFERENCE_OPERATORS)
    for name, spec in OPERATORS.items():
        assert spec.name == name
        assert callable(REFERENCE_OPERATORS[name])


def test_reference_signatures_follow_the_specs():
    for name, spec in OPERATORS.items():
        parameters = inspect.signature(REFERENCE_OPERATORS[name]).parameters.values()
        positional = [p for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        keywords = {p.name for p in parameters if p.kind is p.KEYWORD_ONLY}
        open_keywords = any(p.kind is p.VAR_KEYWORD for p in parameters)
        assert [p.name for p in positional] == list(spec.inputs), name
        optional = [p.name for p in positional if p.default is not inspect.Parameter.empty]
        assert optional == list(spec.inputs[spec.min_inputs:]), name
        declared = set(spec.attribute_map)
        assert keywords <= declared, name
        assert open_keywords or keywords == declared, name
        for attribute in spec.attributes:
            if attribute.name in keywords and not attribute.required:
                parameter = inspect.signature(REFERENCE_OPERATORS[name]).parameters[attribute.name]
                assert parameter.default is not inspect.Parameter.empty, (name, attribute.name)


def test_every_operator_is_documented():
    text = (ROOT / "docs" / "operators.md").read_text()
    for name in OPERATORS:
        assert f"### `{name}(" in text, name


def test_program_and_reference_import_without_torch_or_triton():
    probe = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "sys.modules['triton'] = None\n"
        "import helios.program, helios.reference.operators, helios.reference.interpreter\n"
        "import helios.reference.philox, helios.reference.sampling\n"
        "loaded = [m for m, v in sys.modules.items() if v is not None and m.split('.')[0] in ('torch', 'triton')]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_every_operator_has_a_production_lowering():  # in a subprocess: kernels must see TRITON_INTERPRET first
    assert subprocess.run([sys.executable, "-c", "from helios.program import OPERATORS; from helios.production.lowering import LOWERINGS; assert set(OPERATORS) <= set(LOWERINGS), set(OPERATORS) - set(LOWERINGS)"], cwd=ROOT, env={**__import__("os").environ, "TRITON_INTERPRET": "1"}).returncode == 0
