"""Reading a job's opt-in from its Slurm comment.

A job opts in with a JSON comment holding one of two keys:

    {"jobmedic": {"environment": "prod", "mode": "action", "max_attempts": 3,
                  "checkpoint_dir": "/ckpt/run7"}}
    {"nvidia-recovery": {...}}          # same fields; scripts written for NVIDIA Recovery

Three outcomes, never an exception:

* not opted in: empty comment, plain text, or JSON without either key;
* opted in: the settings, with defaults (`mode` observe, `environment` "");
* invalid: the comment clearly means to opt in (it names a key) but is malformed
  JSON, has wrong types or an unknown mode, names both keys, or is larger than
  `max_bytes`; the reason says what to fix.

Unknown fields next to the known ones are ignored, so newer scripts still work.
"""

from __future__ import annotations

import json
import re
from typing import Any

from workflows.contracts import Mode, OptIn, OptInResult

KEYS = ("jobmedic", "nvidia-recovery")
MAX_TEXT_FIELD = 1024

# plain text that still clearly tries to opt in: `jobmedic: ...`, `"nvidia-recovery" = ...`
_MENTIONS_KEY = re.compile(r"""["']?\b(?:jobmedic|nvidia-recovery)\b["']?\s*[:=]""", re.IGNORECASE)


def parse_opt_in(comment: str | None, *, max_bytes: int = 4096) -> OptInResult:
    """Read the opt-in from a job comment; see the module docstring for the rules."""
    try:
        return _parse(comment or "", max_bytes=max_bytes)
    except Exception as exc:  # never let one job's comment stop the watch of the others
        return _invalid(f"comment could not be read ({type(exc).__name__}: {exc})")


def _parse(comment: str, *, max_bytes: int) -> OptInResult:
    text = comment.strip()
    if not text:
        return OptInResult()
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        if _mentions_key(text):
            return _invalid(f"comment is {size} bytes; an opt-in may be at most {max_bytes} bytes")
        return OptInResult()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        if _mentions_key(text):
            return _invalid(f"comment is not valid JSON ({exc}); write it like "
                            '{"jobmedic":{"environment":"prod","mode":"observe"}}')
        return OptInResult()
    if not isinstance(data, dict):
        return OptInResult()
    present = [key for key in KEYS if key in data]
    if not present:
        return OptInResult()
    if len(present) > 1:
        return _invalid(f"comment names both {KEYS[0]!r} and {KEYS[1]!r}; keep one")
    key = present[0]
    return _validate(key, data[key])


def _validate(key: str, body: Any) -> OptInResult:
    if not isinstance(body, dict):
        return _invalid(f"{key!r} must map to a JSON object, not {_type_name(body)}")
    fields: dict[str, Any] = {"key": key}

    environment = body.get("environment", "")
    if environment is None:
        environment = ""
    if not isinstance(environment, str):
        return _invalid(f"{key}.environment must be a string, not {_type_name(environment)}")
    if len(environment) > MAX_TEXT_FIELD:
        return _invalid(f"{key}.environment is longer than {MAX_TEXT_FIELD} characters")
    fields["environment"] = environment

    mode = body.get("mode", Mode.OBSERVE.value)
    if mode is None:
        mode = Mode.OBSERVE.value
    if not isinstance(mode, str):
        return _invalid(f"{key}.mode must be a string, not {_type_name(mode)}")
    try:
        fields["mode"] = Mode(mode.strip().lower())
    except ValueError:
        allowed = " or ".join(repr(m.value) for m in Mode)
        return _invalid(f"{key}.mode is {mode[:40]!r}; use {allowed}")

    attempts = body.get("max_attempts")
    if attempts is not None:
        # bool is an int subclass in Python; `true` is not a number of attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            return _invalid(f"{key}.max_attempts must be a whole number, not {_type_name(attempts)}")
        if attempts < 0:
            return _invalid(f"{key}.max_attempts must be 0 or more, not {attempts}")
        fields["max_attempts"] = attempts

    checkpoint_dir = body.get("checkpoint_dir")
    if checkpoint_dir is not None:
        if not isinstance(checkpoint_dir, str):
            return _invalid(f"{key}.checkpoint_dir must be a string, not {_type_name(checkpoint_dir)}")
        if len(checkpoint_dir) > MAX_TEXT_FIELD or "\x00" in checkpoint_dir:
            return _invalid(f"{key}.checkpoint_dir is not a usable path")
        fields["checkpoint_dir"] = checkpoint_dir or None

    return OptInResult(opted_in=True, opt_in=OptIn(**fields))


def _mentions_key(text: str) -> bool:
    return _MENTIONS_KEY.search(text) is not None


def _invalid(reason: str) -> OptInResult:
    return OptInResult(opted_in=False, opt_in=None, invalid_reason=reason)


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
