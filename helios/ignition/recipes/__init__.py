"""Recipes (preparation side, host): one module per model family; the only place family names appear."""
