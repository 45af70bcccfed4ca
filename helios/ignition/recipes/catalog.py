"""Which checkpoints the recipes serve (preparation side, host; no imports, so help text can read it)."""

from __future__ import annotations

# config.json model_type -> recipe module (under helios.ignition.recipes)
RECIPE_MODULES: dict[str, str] = {
    "llama": "llama_family",
    "qwen2": "llama_family",
    "qwen3": "llama_family",
    "mistral": "llama_family",
    "lfm2": "lfm2",
    "llava": "llava",  # a CLIP vision tower over a Llama-family text model (docs/vision.md)
    "deepseek_v3": "deepseek_v3",
}
FAMILY_DESCRIPTION = ("Llama 3.x, Qwen2/2.5, Qwen3 dense, Mistral, LFM2, dense DeepSeek-V3 and LLaVA (CLIP over a "
                      "Llama-family model)")
