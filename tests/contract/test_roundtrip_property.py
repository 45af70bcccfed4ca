"""Property: any valid contract survives binary -> PreparedContract -> JSON -> PreparedContract unchanged."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helios.contract import PreparedContract, from_json, to_json
from helios.proto import contract_pb2 as c
from helios.proto import core_pb2
from helios.proto import manifest_pb2 as m
from tests.contract import valid

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
small = st.integers(min_value=0, max_value=2**31 - 1)
# Each sampling default within the range a request value may take (validate.py rejects the rest).
maybe_temperature = st.none() | st.floats(min_value=0.0, max_value=2.0, width=32)
maybe_fraction = st.none() | st.floats(min_value=0.0, max_value=1.0, width=32)
maybe_top_p = st.none() | st.floats(min_value=0.0, max_value=1.0, width=32, exclude_min=True)


@st.composite
def deployments(draw) -> core_pb2.DeploymentBody:
    serving, manifest = valid.serving(), valid.manifest()
    serving.served_id = draw(names)
    serving.aliases[:] = draw(st.lists(names, max_size=3))
    serving.cache_identity = draw(names)
    serving.context_tokens = draw(st.integers(16, 1 << 20))
    serving.page_capacity, serving.snapshot_capacity = draw(small), draw(small)
    for field, strategy in (("temperature", maybe_temperature), ("top_p", maybe_top_p), ("min_p", maybe_fraction)):
        value = draw(strategy)
        if value is None:
            serving.defaults.sampling.ClearField(field)
        else:
            setattr(serving.defaults.sampling, field, value)
    version = draw(st.sampled_from([2, 3]))
    serving.model.version = version
    if version == 2:
        for g in serving.model.graphs:
            del g.tuned_bindings[:]
    # Extra decode capacities beside the base graphs.
    template_graph = serving.model.graphs[2]
    for capacity in draw(st.lists(st.integers(1, 4), unique=True, max_size=3)):
        name = f"decode_extra_{capacity}"
        graph = c.GraphContract()
        graph.CopyFrom(template_graph)
        graph.name = name
        graph.capacity.batch_capacity = graph.capacity.packed_token_capacity = capacity
        graph.state_rows_per_request = draw(st.integers(0, 8))
        for binding in graph.value_bindings:
            binding.offset = draw(st.integers(-(2**40), 2**40))
            binding.padding = draw(st.integers(-(2**31), 2**31))
        serving.model.graphs.append(graph)
        manifest.graphs.append(m.GraphHandle(name=name, operation=c.OPERATION_DECODE, program_resources=[f"p/{name}"],
                                             batch_capacity=capacity, packed_token_capacity=capacity))
    frontend = serving.model.frontend
    frontend.tool_syntax.closer = draw(st.text(max_size=8))
    frontend.reasoning_syntax.open = draw(st.text(max_size=8))
    frontend.prompt_syntax.prefix_boundaries.extend(
        c.PrefixBoundaryRule(role=r, marker=k) for r, k in draw(st.lists(st.tuples(names, names), max_size=2)))
    manifest.abi_label = draw(st.text(max_size=10))
    return core_pb2.DeploymentBody(contract=serving, manifest=manifest)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployments())
def test_binary_prepared_json_prepared_is_identity(deployment):
    wire = core_pb2.DeploymentBody.FromString(deployment.SerializeToString(deterministic=True))
    first = PreparedContract.decode(wire.contract, wire.manifest)
    serving, manifest = first.to_proto()
    text = to_json(core_pb2.DeploymentBody(contract=serving, manifest=manifest))
    again = from_json(text)
    second = PreparedContract.decode(again.contract, again.manifest)
    assert second == first
