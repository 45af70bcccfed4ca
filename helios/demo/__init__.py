"""The embedded demo model (issue #9): a tiny chat model that Helios trains itself.

Host side except where a module says otherwise. The package owns:

- `kinds`, `phrasing`, `vocabulary`, `tools`: task kinds, expectations, phrasing pools and fixed tables (host);
- `arithmetic`, `records`, `conversation`, `toolspace`, `tool_concepts`, `tool_tasks`, `tasks`: the
  synthetic task families, the generated tool space, and examples drawn from them (host);
- `chat_template.jinja` and `template`: the chat template and its jinja2 renderer (host);
- `corpus`: deterministic rendering of examples into prompt/completion pairs (host);
- `scoring`: per-task correctness of generated text, however it was produced (host);
- `tokenizer`: byte-level BPE training with the `tokenizers` library (host);
- `train`, `drafting` and `evaluation`: training of the model and its drafter, distillation, drafter
  acceptance and HF greedy evaluation (device: torch, transformers);
- `checkpoint/`: the committed Hugging Face checkpoint that `make demo` prepares and serves;
- `drafter/`: the committed draft model (same tokenizer), for speculative generation.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKPOINT_DIR = PACKAGE_DIR / "checkpoint"  # the committed, trained checkpoint
DRAFTER_DIR = PACKAGE_DIR / "drafter"  # the committed draft model, trained beside the checkpoint
TEMPLATE_PATH = PACKAGE_DIR / "chat_template.jinja"  # the chat template source

__all__ = ["CHECKPOINT_DIR", "DRAFTER_DIR", "PACKAGE_DIR", "TEMPLATE_PATH"]
