"""Helios: a serving system for prepared LLM cores.

Host packages (contract, core, engine, frontend, runtime, server, reference, program, cli) import
neither torch nor triton; only helios.production device modules, helios.ignition and the demo's
training do. docs/architecture.md gives the rooms and the layer rules.
"""

__version__ = "0.1.0"
