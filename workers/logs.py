"""Logging is configured here, once, by the processes in `workers/` (never at import time)."""

from __future__ import annotations

import sys

from loguru import logger


def configure_logging(level: str = "INFO", *, json: bool = False) -> None:
    """Send loguru's output to stderr at `level`; stdout stays free for command output."""
    logger.remove()
    if sys.stderr is None:  # started with stderr closed (slurmctld's strigger programs): nowhere to log
        return
    logger.add(sys.stderr, level=level.upper(), serialize=json, backtrace=False, diagnose=False)
