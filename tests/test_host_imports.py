"""Host code imports with torch and triton absent (CONVENTIONS habit 2), and no model family names
appear in runtime packages (habit 5)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Packages allowed to import torch: the production device side, preparation, and demo training.
DEVICE_PACKAGES = ("helios.production", "helios.ignition", "helios.demo")
# NOTE: "Qwen Coder" names a tool-call syntax in the specification ("Qwen Coder function tags"), not a
# model identity, so the syntax name is allowed; the family name on its own is not.
FAMILY_NAMES = re.compile(r"\b(llama|qwen(?![-_ ]coder\b)|mistral|gemma|deepseek|phi-?\d|gpt-?oss)\b", re.IGNORECASE)

_PROBE = """
import importlib, pkgutil, sys
for blocked in ("torch", "triton", "transformers"):
    sys.modules[blocked] = None  # any import of them now raises ImportError
import helios
host = []
for info in pkgutil.walk_packages(helios.__path__, "helios."):
    if info.name.startswith(DEVICE) or info.name.endswith("__main__"):
        continue
    importlib.import_module(info.name)
    host.append(info.name)
print("\\n".join(host))
"""


def test_every_host_module_imports_without_torch_or_triton():
    probe = f"DEVICE = {DEVICE_PACKAGES!r}\n" + _PROBE
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    imported = set(result.stdout.split())
    assert {"helios.contract", "helios.proto", "helios.cli", "helios.runtime.request"} <= imported


def test_no_model_family_names_in_runtime_packages():
    offenders = []
    for path in sorted((ROOT / "helios").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(("helios/ignition/recipes/", "helios/demo/", "helios/proto/")):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if FAMILY_NAMES.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert not offenders, "model family names outside helios/ignition/recipes/:\n" + "\n".join(offenders)
