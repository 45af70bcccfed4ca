"""The frontend (host side): Bootstrap (tokenizer, chat template, typed frontend settings),
incremental detokenization, stops, reasoning and tool parsers, the OutputPipeline and presentation.

No torch, no triton. Submodules are imported directly (`from helios.frontend.bootstrap import
Bootstrap`), so importing this package costs nothing.
"""
