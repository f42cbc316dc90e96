"""`python -m compiler.cli` runs the `tcc` command (as `python -m compiler` does)."""

from compiler.cli import main

raise SystemExit(main())
