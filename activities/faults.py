"""Fault injection for crash-safety tests: a configured pause at the start of an activity.

Settings.fault_delays maps an activity name to seconds; empty (the default) in
every real deployment. The pause gives a test a window to kill the worker
inside a given stage of a recovery.
"""

from __future__ import annotations

import asyncio

from loguru import logger


async def injected_delay(delays: dict[str, float], name: str) -> None:
    seconds = delays.get(name, 0.0)
    if seconds > 0:
        logger.warning("fault injection: activity {} pauses {:.1f}s", name, seconds)
        await asyncio.sleep(seconds)
