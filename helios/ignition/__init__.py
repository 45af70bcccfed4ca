"""Ignition (preparation side, host): checkpoint reading, recipes, reusable contract declarations,
preparation and sealing. Runs once, before serving; serving never reads a checkpoint."""
