"""The embedded demo model (issue #9): a tiny chat model that Helios trains itself.

Host side except where a module says otherwise. The package owns:

- `vocabulary`, `tools`, `tasks`: the synthetic task families and their fixed tables (host);
- `chat_template.jinja` and `template`: the chat template and its jinja2 renderer (host);
- `corpus`: deterministic rendering of examples into prompt/completion pairs (host);
- `scoring`: per-task correctness of generated text, however it was produced (host);
- `tokenizer`: byte-level BPE training with the `tokenizers` library (host);
- `train` and `evaluation`: model training and HF greedy evaluation (device: torch, transformers);
- `checkpoint/`: the committed Hugging Face checkpoint that `make demo` prepares and serves.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKPOINT_DIR = PACKAGE_DIR / "checkpoint"  # the committed, trained checkpoint
TEMPLATE_PATH = PACKAGE_DIR / "chat_template.jinja"  # the chat template source

__all__ = ["CHECKPOINT_DIR", "PACKAGE_DIR", "TEMPLATE_PATH"]
