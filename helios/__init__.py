"""Helios: a serving system for prepared LLM cores.

Host packages (contract, core, frontend, runtime, server, reference, program) import neither torch
nor triton; only helios.production device modules and helios.ignition do.
"""

__version__ = "0.1.0"
