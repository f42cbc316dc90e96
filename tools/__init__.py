"""Developer tools run as modules: `python -m tools.corpus [DIR]` (the corpus runner)."""
