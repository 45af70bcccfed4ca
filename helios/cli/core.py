"""CLI for the core format (host side): `helios keys`, `helios core pack|migrate|relocate`, `helios verify`,
`helios inspect`. Handlers import helios.core lazily so `helios --help` stays fast."""

from __future__ import annotations

import argparse
import json
import os
import sys

KIND_NAMES = ("program", "weight", "tokenizer", "chat-template", "weight-catalog", "rebuild-manifest", "opaque")


def register(subparsers) -> None:
    formatter = argparse.RawDescriptionHelpFormatter

    keys = subparsers.add_parser(
        "keys", help="create signing and protection keys",
        description="Create keys for signing cores (Ed25519) and for version-4 protected cores (AES-256).",
    )
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    new = keys_sub.add_parser(
        "new", help="a new Ed25519 signing key pair", formatter_class=formatter,
        description="Write a new Ed25519 private key (PEM, PKCS#8, mode 0600) at KEY and its public key\n"
        "(PEM) at KEY.pub. Sign cores with KEY; give KEY.pub to whoever should trust them.",
        epilog="example:\n  helios keys new --out publisher.key\n  helios core pack --key publisher.key ...",
    )
    new.add_argument("--out", required=True, metavar="KEY", help="private key file to create (KEY.pub is created too)")
    new.add_argument("--force", action="store_true", help="replace KEY and KEY.pub if they exist (default: refuse)")
    new.set_defaults(func=_keys_new)
    protection = keys_sub.add_parser(
        "protection", help="a new AES-256 key for index-v4 cores",
        description="Write a new AES-256 protection key (64 hexadecimal digits, mode 0600). Version-4 "
        "logical-resource cores are sealed and read with it; pass it as --protection-key FILE or name the "
        "file in HELIOS_PROTECTION_KEY_FILE.",
    )
    protection.add_argument("--out", required=True, metavar="FILE", help="key file to create")
    protection.add_argument("--force", action="store_true", help="replace FILE if it exists (default: refuse)")
    protection.set_defaults(func=_keys_protection)

    core = subparsers.add_parser(
        "core", help="pack cores from files, migrate index-v4 cores",
        description="Low-level core tools: `pack` turns files into a signed core (one resource per file); "
        "`migrate` rewrites an index-v4 core as index-v6; `relocate` moves resources into sibling files.",
    )
    core_sub = core.add_subparsers(dest="core_command", metavar="ACTION", required=True)
    pack = core_sub.add_parser(
        "pack", help="pack files into a signed core", formatter_class=formatter,
        description="Pack each RESOURCE_FILE as one resource of a new signed core, in the order given.\n"
        "A RESOURCE_FILE is [KIND:][ID=]PATH: KIND is one of " + ", ".join(KIND_NAMES) + " (default: opaque);\n"
        "ID defaults to the file's base name. Identical inputs give byte-identical cores.",
        epilog="example:\n"
        "  helios core pack --out model.hcore --publisher acme/models --key publisher.key \\\n"
        "      --contract contract.json tokenizer:tokenizer.json chat-template:template.jinja weight:w0=w0.bin",
    )
    pack.add_argument("--out", required=True, metavar="CORE", help="core file to write")
    pack.add_argument("--publisher", required=True, metavar="NAMESPACE",
                      help="publisher namespace to sign; readers must accept exactly this string")
    pack.add_argument("--key", required=True, metavar="KEY", help="Ed25519 private key (from `helios keys new`)")
    pack.add_argument("--contract", metavar="FILE",
                      help="ServingContract as Protobuf JSON (.json) or binary Protobuf (any other name)")
    pack.add_argument("--manifest", metavar="FILE",
                      help="ExecutionManifest as Protobuf JSON (.json) or binary Protobuf (any other name)")
    pack.add_argument("--format", default="payload", choices=("payload", "index-v6", "index-v4"),
                      help="payload: format 2 (default); index-v6 / index-v4: logical-resource core "
                      "(zstd frames / AES-GCM chunks)")
    pack.add_argument("--protection-key", metavar="FILE", help="AES-256 key for --format index-v4")
    pack.add_argument("resources", nargs="+", metavar="RESOURCE_FILE", help="[KIND:][ID=]PATH, one resource each")
    pack.set_defaults(func=_core_pack)
    migrate = core_sub.add_parser(
        "migrate", help="rewrite an index-v4 core as index-v6", formatter_class=formatter,
        description="Verify and decrypt every resource of an index-v4 core, then write an index-v6 core\n"
        "(zstd frames) with the same namespace, contract, manifest and resources, signed with --key.",
        epilog="example:\n  helios core migrate old.hcore --out new.hcore --trust publisher.key.pub \\\n"
        "      --accept acme/models --key publisher.key --protection-key aes.key",
    )
    migrate.add_argument("core", metavar="CORE", help="the index-v4 core")
    migrate.add_argument("--out", required=True, metavar="CORE", help="index-v6 core to write")
    _trust_arguments(migrate)
    migrate.add_argument("--key", required=True, metavar="KEY", help="Ed25519 private key that signs the result")
    migrate.add_argument("--protection-key", metavar="FILE",
                         help="the source's AES-256 key (default: the file HELIOS_PROTECTION_KEY_FILE names)")
    migrate.set_defaults(func=_core_migrate)

    relocate = core_sub.add_parser(
        "relocate", help="move resources into sibling files (no re-signing)", formatter_class=formatter,
        description="Move the stored bytes of resources between the core file and sibling files in its\n"
        "directory. Only the unsigned LocationSet changes: the signature stays valid and no key is needed.\n"
        "ID=FILE moves resource ID into sibling FILE; ID= moves it back into the core file.",
        epilog="example:\n  helios core relocate model.hcore weights/0=rank0.bin weights/1=rank0.bin",
    )
    relocate.add_argument("core", metavar="CORE", help="core file to rewrite in place")
    relocate.add_argument("moves", nargs="+", metavar="ID=FILE", help="resource id and its new sibling file")
    relocate.set_defaults(func=_core_relocate)

    verify = subparsers.add_parser(
        "verify", help="check a core completely (exit 0 sound, 3 not)", formatter_class=formatter,
        description="Verify a core: the signature against a key you trust, the publisher namespace against\n"
        "your acceptance (exactly), the layout, and every resource (chunk digests, frame, decoding).\n"
        "Prints one line: a summary (exit 0) or the violated invariant (exit 3).",
        epilog="example:\n  helios verify model.hcore --accept acme/models --trust publisher.key.pub",
    )
    verify.add_argument("core", metavar="CORE", help="core file to verify")
    _trust_arguments(verify)
    verify.add_argument("--protection-key", metavar="FILE", help="AES-256 key of an index-v4 core")
    verify.set_defaults(func=_verify)

    inspect = subparsers.add_parser(
        "inspect", help="show a core's envelope, resources and contract",
        description="Show what a core contains without decoding it: format, signer, publisher namespace, "
        "resources with sizes and locations, contract and manifest summary. Without --trust the "
        "signature is reported UNVERIFIED and every field is only the file's claim.",
    )
    inspect.add_argument("core", metavar="CORE", help="core file to inspect")
    inspect.add_argument("--trust", action="append", metavar="PUBKEY",
                         help="check the signature with this public key or directory of .pub files")
    inspect.add_argument("--json", action="store_true", help="print JSON for machines")
    runtime = inspect.add_argument_group(
        "execution geometry (--runtime)",
        "Load the verified core with the production runtime, as `helios serve --runtime production` does, "
        "and print what it will run: the selected graphs and their capacities, every buffer with its loaded "
        "shape, the cache pages sized from the memory left after weights and graphs, the startup phases with "
        "their durations, the path (Triton or cuBLAS) chosen for each small matrix product, and the measured "
        "cost of one round of each DECODE and SPECULATIVE graph (what adaptive speculation chooses from).")
    runtime.add_argument("--runtime", action="store_true",
                         help="load the core on the production runtime and print its execution geometry "
                              "(needs --accept and --trust)")
    runtime.add_argument("--accept", metavar="NAMESPACE",
                         help="the publisher namespace you accept; must equal the signed one exactly (with "
                              "--trust and without --runtime: read each rank's weight catalog and show its "
                              "weights and bytes)")
    runtime.add_argument("--device", metavar="DEVICE", help="cuda, cuda:N or cpu (default: cuda if present)")
    runtime.add_argument("--max-concurrency", type=int, metavar="N",
                         help="load-time selection: capture graphs for at most N concurrent requests")
    runtime.add_argument("--gpu-memory-fraction", type=float, metavar="F",
                         help="share of the GPU's memory Helios may hold, weights, graphs and cache together "
                              "(default 0.9)")
    runtime.add_argument("--pages", type=int, metavar="N", help="cache pages (default: sized from memory)")
    runtime.add_argument("--served-rounds", type=int, default=0, metavar="N",
                         help="also serve N rounds of each DECODE and SPECULATIVE graph through the batching "
                              "scheduler (synthetic greedy requests, as many as the graph has lanes) and print "
                              "their wall time, host work included, beside the measured table: what the "
                              "adaptive choice's served costs start from (default 0: not served)")
    inspect.set_defaults(func=_inspect)


def _trust_arguments(parser) -> None:
    parser.add_argument("--accept", required=True, metavar="NAMESPACE",
                        help="the publisher namespace you accept; must equal the signed one exactly")
    parser.add_argument("--trust", required=True, action="append", metavar="PUBKEY",
                        help="a trusted public key file or a directory of .pub files (repeatable)")


def _keys_new(args) -> int:
    from helios.core import generate_keypair

    generate_keypair(args.out, overwrite=args.force)
    print(f"wrote {args.out} (private, keep it secret) and {args.out}.pub (give to verifiers)")
    return 0


def _keys_protection(args) -> int:
    from helios.core import generate_protection_key

    generate_protection_key(args.out, overwrite=args.force)
    print(f"wrote {args.out} (AES-256 protection key, keep it secret)")
    return 0


def _read_message(path: str, message):
    from google.protobuf import json_format

    from helios.core.errors import EnvelopeInvalid

    try:
        with open(path, "rb") as file:
            data = file.read()
        if path.endswith(".json"):
            json_format.Parse(data.decode(), message)
        else:
            message.ParseFromString(data)
    except (OSError, ValueError, json_format.ParseError) as error:
        raise EnvelopeInvalid(f"{path!r} is not a {type(message).__name__}: {error}") from None
    return message


def _resource_specs(specs: list[str]) -> list[tuple[str, int, str]]:
    from helios.core.errors import EnvelopeInvalid
    from helios.proto import core_pb2

    parsed = []
    for spec in specs:
        kind_name, rest = "opaque", spec
        head, sep, tail = spec.partition(":")
        if sep and head in KIND_NAMES:
            kind_name, rest = head, tail
        resource_id, sep, path = rest.partition("=")
        if not sep:
            resource_id, path = os.path.basename(rest), rest
        if not resource_id or not path:
            raise EnvelopeInvalid(f"resource file {spec!r} is not [KIND:][ID=]PATH")
        kind = core_pb2.ResourceKind.Value("RESOURCE_KIND_" + kind_name.upper().replace("-", "_"))
        parsed.append((resource_id, kind, path))
    return parsed


def _core_pack(args) -> int:
    from helios.core import CoreFileUnavailable, ResourceInput, write_core
    from helios.core.errors import EnvelopeInvalid
    from helios.proto import contract_pb2, core_pb2, manifest_pb2

    deployment = core_pb2.DeploymentBody()
    if args.contract:
        deployment.contract.CopyFrom(_read_message(args.contract, contract_pb2.ServingContract()))
    if args.manifest:
        deployment.manifest.CopyFrom(_read_message(args.manifest, manifest_pb2.ExecutionManifest()))
    specs = _resource_specs(args.resources)

    def resources():
        for resource_id, kind, path in specs:
            try:
                with open(path, "rb") as file:
                    data = file.read()
            except OSError as error:
                raise EnvelopeInvalid(f"resource {resource_id!r}: cannot read {path!r}: {error.strerror}") from None
            yield ResourceInput(resource_id, kind, data)

    try:
        write_core(
            args.out, publisher=args.publisher, signing_key=args.key, deployment=deployment,
            resources=resources(), format=args.format, protection_key=args.protection_key,
        )
    except OSError as error:
        raise CoreFileUnavailable(f"cannot write {args.out!r}: {error.strerror}") from None
    print(f"wrote {args.out}: {args.format} core of {len(specs)} resources for {args.publisher!r}, "
          f"{os.path.getsize(args.out):,} bytes")
    return 0


def _core_migrate(args) -> int:
    from helios.core import CoreFileUnavailable, migrate_core

    try:
        migrate_core(args.core, args.out, trusted_keys=args.trust, accept=args.accept, signing_key=args.key,
                     protection_key=args.protection_key)
    except OSError as error:
        raise CoreFileUnavailable(f"{error.filename or args.core!r}: {error.strerror}") from None
    print(f"wrote {args.out}: index-v6 core migrated from {args.core}")
    return 0


def _core_relocate(args) -> int:
    from helios.core import CoreFileUnavailable, relocate_core
    from helios.core.errors import LocationInvalid

    placement = {}
    for move in args.moves:
        resource_id, sep, name = move.rpartition("=")
        if not sep or not resource_id:
            raise LocationInvalid(f"{move!r} is not ID=FILE")
        placement[resource_id] = name
    try:
        relocate_core(args.core, placement)
    except OSError as error:
        raise CoreFileUnavailable(f"{error.filename or args.core!r}: {error.strerror}") from None
    print(f"relocated {len(placement)} resources of {args.core}; the signature is unchanged")
    return 0


def _verify(args) -> int:
    from helios.core import CoreFormatError, open_core

    try:
        with open_core(args.core, trusted_keys=args.trust, accept=args.accept,
                       protection_key=args.protection_key) as core:
            core.verify_all()
            decoded = sum(r.decoded_nbytes for r in core.resources.values())
            print(f"ok: {args.core}: {core.format} core of {core.publisher!r}, {len(core.resources)} resources, "
                  f"{decoded:,} bytes decoded, signed by trusted key {core.public_key.hex()[:16]}")
    except CoreFormatError as error:
        print(f"helios verify: {args.core}: {type(error).__name__}: {error}", file=sys.stderr)
        return error.exit_code
    except OSError as error:
        print(f"helios verify: {args.core}: CoreFileUnavailable: cannot read: {error.strerror}", file=sys.stderr)
        return 3
    return 0


def _inspect(args) -> int:
    from helios.core import CoreFormatError, format_inspection, inspect_core
    from helios.errors import HeliosError

    if args.runtime:
        refusal = _runtime_refusal(args)
        if refusal:
            print(f"helios inspect: {refusal}", file=sys.stderr)
            return 2
    try:
        report = _runtime_report(args) if args.runtime else inspect_core(args.core, args.trust)
        if not args.runtime and args.accept and args.trust:
            _read_rank_catalogs(args, report)
    except CoreFormatError as error:
        print(f"helios inspect: {args.core}: {type(error).__name__}: {error}", file=sys.stderr)
        return error.exit_code
    except OSError as error:
        print(f"helios inspect: {args.core}: cannot read: {error.strerror}", file=sys.stderr)
        return 2
    except HeliosError as error:  # the production runtime refused the core at load
        print(f"helios inspect: {args.core}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.runtime:
        from helios.production.inspection import format_runtime_report

        print(format_runtime_report(report))
    else:
        print(format_inspection(report))
    return 0


def _read_rank_catalogs(args, report: dict) -> None:
    """With --trust and --accept: open the verified core and add each rank's weight catalog to its row."""
    from helios.contract.catalogs import rank_weights, read_weight_catalog
    from helios.core import open_core
    from helios.proto import core_pb2

    with open_core(args.core, trusted_keys=args.trust, accept=args.accept) as core:
        catalogs: dict[int, tuple[str, core_pb2.WeightCatalog]] = {}
        for resource in core.resources.values():
            if resource.kind == core_pb2.RESOURCE_KIND_WEIGHT_CATALOG:
                catalog = read_weight_catalog(core.read(resource.id))
                if catalog is not None:
                    catalogs[catalog.rank] = (resource.id, catalog)
        sizes = {r.id: r.decoded_nbytes for r in core.resources.values()}
    ranks = report["ranks"]
    weights = rank_weights([catalogs[r["rank"]][1] if r["rank"] in catalogs else None for r in ranks], sizes)
    for row, counted in zip(ranks, weights, strict=True):
        row.update(catalog=catalogs[row["rank"]][0] if row["rank"] in catalogs else None, **counted)


def _runtime_refusal(args) -> str | None:
    if not args.accept or not args.trust:
        return "--runtime loads the core, which needs --accept NAMESPACE and --trust PUBKEY"
    if args.max_concurrency is not None and args.max_concurrency < 1:
        return "--max-concurrency must be at least 1"
    if args.served_rounds < 0:
        return "--served-rounds must be at least 0"
    return None


def _runtime_report(args) -> dict:
    """`helios inspect --runtime`: the verified core loaded on the production runtime, its geometry."""
    from helios.core import open_core
    from helios.production.inspection import runtime_report
    from helios.production.loading import load_native_model

    with open_core(args.core, trusted_keys=args.trust, accept=args.accept) as core:
        # as `helios serve --runtime production` loads it by default: every speculative width, and the
        # round costs its adaptive choice reads, measured
        widths = tuple(core.contract.speculative_widths)
        if core.manifest.ranks > 1:  # production ranks: this rank 0 and its peers spawned on this host
            return _ranks_report(args, core)
        model = load_native_model(core, max_concurrency=args.max_concurrency, device=args.device,
                                  pages=args.pages, gpu_memory_fraction=args.gpu_memory_fraction,
                                  speculative_width=max(widths) if widths else None, measure_costs=True)
        return runtime_report(model, _served(args, model))


def _ranks_report(args, core) -> dict:
    """`inspect --runtime` on a core of several ranks: loaded as `helios serve` loads it (peers spawned)."""
    from helios.cli.compose import rank_options
    from helios.production.inspection import runtime_report
    from helios.production.loading import load_device
    from helios.production.ranks.rank_zero import load_rank_zero

    model = load_rank_zero(core, rank_options(args.core, args.trust, args.accept, "threads", None, 30.0),
                           device=load_device(args.device), max_concurrency=args.max_concurrency, pages=args.pages,
                           speculative_width=None, history_drafting=False, measure_costs=True,
                           gpu_memory_fraction=args.gpu_memory_fraction)
    try:
        return runtime_report(model, _served(args, model))
    finally:
        model.executor.close()


def _served(args, model) -> tuple:
    """`--served-rounds N`: each DECODE and SPECULATIVE graph's served rounds (helios/engine/served_probe.py)."""
    if not args.served_rounds:
        return ()
    from helios.engine.served_probe import probe_served_costs

    return probe_served_costs(model.executor, model.contract, pages=model.pages, rounds=args.served_rounds,
                              graph_names=model.graphs)
