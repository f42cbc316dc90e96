"""`python -m compiler ...` is the `tcc` command."""

from __future__ import annotations

import sys

from compiler.cli import main

sys.exit(main())
