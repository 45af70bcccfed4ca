"""The conformance suite (host side; production is imported only by the levels that run it): both
runtimes on the same core and workload, the first divergence found and explained.

    from conformance.runner import ConformOptions, conform
    report = conform(core, ConformOptions(levels=("operators", "trace", "e2e")))
    print(report.table())                 # or report.to_json(); report.exit_code

Modules, one concept each:
  report     Divergence, CaseResult, LevelResult, Report: the table and the JSON object
  tolerance  per-dtype tolerances, element comparison
  draw       the numeric-tie rule of one sampled draw (the reference re-draws under bounded noise);
             exact ties judged by the sampling rule's tie-break
  workload   workloads as data (OpenAI completion or chat bodies + scheduling limits, `--workloads`)
  generate   the default workloads, derived from the core's geometry (Geometry.of)
  coverage   which mechanisms each level exercised; a supported one not reached is "incomplete"
  operators  level 1: every operator and fusion, reference interpreter against production lowering
  trace      the submission trace: TraceRecorder (an executor seam), the JSON-lines file format
  state      what a round wrote (cache positions, logits, state rows), compared; page-choice rules
  audit      level 2: the reference replays a trace and compares every field and the state
  e2e        level 3: a workload through both full runtimes, compared per request
  resources  every page, slot, round and frame back once a runtime is driven
  runner     conform(), the production side (NativeModel + the batching engine, traced), audit_file()
"""
