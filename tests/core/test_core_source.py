"""CoreSource: an opened core and a prepared core offer the same reading surface."""

from __future__ import annotations

from helios.core import CoreSource, ResourceInput, open_core, write_core
from helios.ignition.prepare import PreparedCore, PreparedResource
from helios.proto import contract_pb2, core_pb2, manifest_pb2
from tests.core.forge import PUBLISHER, SIGNING_KEY, WEIGHT


def test_an_opened_core_is_a_core_source(tmp_path, trust):
    path = tmp_path / "tiny.hcore"
    write_core(path, publisher=PUBLISHER, signing_key=SIGNING_KEY, deployment=core_pb2.DeploymentBody(),
               resources=[ResourceInput("w", WEIGHT, b"abc")])
    with open_core(path, trusted_keys=trust, accept=PUBLISHER) as core:
        assert isinstance(core, CoreSource)
        assert [r.id for r in core.resources.values()] == ["w"]
        assert core.read("w") == b"abc"


def test_a_prepared_core_is_a_core_source():
    core = PreparedCore(contract_pb2.ServingContract(), manifest_pb2.ExecutionManifest(),
                        (PreparedResource("w", WEIGHT, lambda: b"abc"),))
    assert isinstance(core, CoreSource)
    assert [r.id for r in core.resources] == ["w"]
    assert core.read("w") == b"abc"
