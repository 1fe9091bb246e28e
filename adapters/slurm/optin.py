"""Reading a job's opt-in from its Slurm comment.

A job opts in with a JSON comment holding one of two keys:

    {"jobmedic": {"environment": "prod", "mode": "action", "max_attempts": 3,
                  "checkpoint_dir": "/ckpt/run7"}}
    {"nvidia-recovery": {...}}          # same fields; scripts written for NVIDIA Recovery
    {"jobmedic": {"environment": "prod", "progress_pattern": "shard (\\d+) done"}}

Three outcomes, never an exception:

* not opted in: empty comment, plain text, or JSON without either key;
* opted in: the settings, with defaults (`mode` observe, `environment` "");
* invalid: the comment clearly means to opt in (it names a key) but is malformed
  JSON, has wrong types or an unknown mode, names both keys, or is larger than
  `max_bytes`; the reason says what to fix.

`progress_pattern` names the job's own progress line (a Python regular
expression; its first group, if any, is the iteration). It runs in the watch on
every job's new lines, so it must be safe to run there: at most
MAX_PATTERN_CHARS characters, it compiles, and it has no shape that can
backtrack without end - no back-references, look-arounds or conditionals, no
repeat inside a repeat (`(a+)+`), no repeated alternation (`(a|b)*`), at most
MAX_OPEN_REPEATS open-ended repeats (`+`, `*`, `{n,}`); and it only ever sees
the first 512 characters of a line (`USER_LINE_CHARS` in
activities/detection/progress.py). Anything else makes the opt-in
invalid (audited, the job is left alone), with the reason.

Unknown fields next to the known ones are ignored, so newer scripts still work.
"""

from __future__ import annotations

import json
import re
from typing import Any

from workflows.contracts import Mode, OptIn, OptInResult

try:  # Python 3.11+ keeps the parser private; its structure is what re itself compiles from
    import re._constants as _sre_constants  # type: ignore[import-not-found]
    import re._parser as _sre_parser  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_constants
    import sre_parse as _sre_parser

_REPEATS = {_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT}
if hasattr(_sre_constants, "POSSESSIVE_REPEAT"):
    _REPEATS.add(_sre_constants.POSSESSIVE_REPEAT)
_REFUSED = {
    _sre_constants.GROUPREF: "uses a back-reference",
    _sre_constants.GROUPREF_EXISTS: "uses a conditional group",
    _sre_constants.ASSERT: "uses a look-around",
    _sre_constants.ASSERT_NOT: "uses a look-around",
}

KEYS = ("jobmedic", "nvidia-recovery")
MAX_TEXT_FIELD = 1024
MAX_PATTERN_CHARS = 200
MAX_OPEN_REPEATS = 2

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

    pattern = body.get("progress_pattern")
    if pattern is not None:
        if not isinstance(pattern, str):
            return _invalid(f"{key}.progress_pattern must be a string, not {_type_name(pattern)}")
        problem = progress_pattern_problem(pattern)
        if problem is not None:
            return _invalid(f"{key}.progress_pattern {problem}")
        fields["progress_pattern"] = pattern or None

    straggler_action = body.get("straggler_action")
    if straggler_action is not None:
        if not isinstance(straggler_action, bool):
            return _invalid(f"{key}.straggler_action must be true or false, not {_type_name(straggler_action)}")
        fields["straggler_action"] = straggler_action

    return OptInResult(opted_in=True, opt_in=OptIn(**fields))


def progress_pattern_problem(pattern: str) -> str | None:
    """Why `pattern` may not be a job's progress pattern (see the module docstring), or None when it may."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"is {len(pattern)} characters long; keep it under {MAX_PATTERN_CHARS} (it only needs to find the number)"
    if "\x00" in pattern:
        return "contains a NUL character"
    try:
        re.compile(pattern)
        parsed = _sre_parser.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"does not compile ({exc}); write a Python regular expression like 'step (\\d+)'"
    problem = _shape_problem(parsed, inside_repeat=False)
    if problem is not None:
        return problem
    opened = _open_repeats(parsed)
    if opened > MAX_OPEN_REPEATS:
        return (f"has {opened} open-ended repeats (+, *, {{n,}}); at most {MAX_OPEN_REPEATS} are allowed "
                "- match only the part of the line around the number, like 'step (\\d+)'")
    return None


def _children(op: Any, av: Any) -> list[Any]:
    """The sub-patterns of one parsed item (repeat body, group body, branch alternatives)."""
    if op in _REPEATS:
        return [av[2]]
    if op is _sre_constants.SUBPATTERN:
        return [av[-1]]
    if op is _sre_constants.BRANCH:
        return list(av[1])
    if getattr(_sre_constants, "ATOMIC_GROUP", None) is op:
        return [av]
    return []


def _shape_problem(parsed: Any, *, inside_repeat: bool) -> str | None:
    for op, av in parsed:
        if op in _REFUSED:
            return f"{_REFUSED[op]}; those are not allowed in a progress pattern"
        repeats = op in _REPEATS and av[1] > 1
        if repeats and inside_repeat:
            return "repeats a group that itself repeats (like '(a+)+'); that can take forever on some lines"
        if op is _sre_constants.BRANCH and inside_repeat:
            return "repeats an alternation (like '(a|b)*'); that can take forever on some lines"
        for child in _children(op, av):
            problem = _shape_problem(child, inside_repeat=inside_repeat or repeats)
            if problem is not None:
                return problem
    return None


def _open_repeats(parsed: Any) -> int:
    count = 0
    for op, av in parsed:
        if op in _REPEATS and av[1] == _sre_constants.MAXREPEAT:
            count += 1
        for child in _children(op, av):
            count += _open_repeats(child)
    return count


def _mentions_key(text: str) -> bool:
    return _MENTIONS_KEY.search(text) is not None


def _invalid(reason: str) -> OptInResult:
    return OptInResult(opted_in=False, opt_in=None, invalid_reason=reason)


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
