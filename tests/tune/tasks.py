"""Task functions for the executor tests: planted crashes and hangs (module level, so
spawned worker processes import them by name)."""

from __future__ import annotations

import os
import time
from typing import Any

from compiler.tune.job import Outcome, TuneJob, check


def crash_on_one_thread(job: TuneJob, options: Any) -> Outcome:
    if options.threads == 1:
        os._exit(3)  # the worker process dies
    return check(job, options)


def hang_on_one_thread(job: TuneJob, options: Any) -> Outcome:
    if options.threads == 1:
        time.sleep(600)
    return check(job, options)
