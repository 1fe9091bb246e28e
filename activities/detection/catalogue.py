"""The failure-pattern catalogue: a versioned TOML data file, validated on load.

`load_catalogue()` reads `patterns.toml` next to this module (or another file),
checks every expression compiles in Python `re`, ids are unique and every
category, fault domain, severity and role is one the engine knows, and caches
the result per path. A broken catalogue fails loudly, naming the pattern.
"""

from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from adapters.errors import ConfigError
from workflows.contracts import Category, FaultDomain

DEFAULT_PATH = Path(__file__).with_name("patterns.toml")

Severity = Literal["fatal", "error", "warning", "info", "benign"]
Role = Literal["cause", "symptom", "scheduler"]

# extraction runs on one flagged line; longer text is cut first so no regex sees a huge line
MAX_EXTRACT_CHARS = 16384


class PatternSpec(BaseModel):
    """One catalogue entry; `regex` is screened, `extract` pulls named fields from flagged lines."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9_]+$")
    regex: str
    category: Category
    fault_domain: FaultDomain
    severity: Severity
    description: str = ""
    extract: str | None = None
    fields: list[str] = Field(default_factory=list)
    role: Role = "cause"
    condemns: bool = False
    benign: bool = False
    caseless: bool = False

    _compiled: re.Pattern[str] | None = PrivateAttr(default=None)
    _extractor: re.Pattern[str] | None = PrivateAttr(default=None)

    def compile(self) -> None:
        """Compile both expressions; raises re.error on a bad one."""
        flags = re.IGNORECASE if self.caseless else 0
        self._compiled = re.compile(self.regex, flags)
        self._extractor = re.compile(self.extract, flags) if self.extract else None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self.compile()
        assert self._compiled is not None
        return self._compiled

    def matches(self, line: str) -> bool:
        """Whether the screening expression matches `line` (Python `re`, bounded input)."""
        return self.compiled.search(line[:MAX_EXTRACT_CHARS]) is not None

    def extract_fields(self, line: str) -> dict[str, str]:
        """The named fields `extract` finds in `line` (empty values dropped); {} without an extractor."""
        if self._extractor is None and self.extract:
            self.compile()
        if self._extractor is None:
            return {}
        found: dict[str, str] = {}
        # several alternatives may each fill different groups (e.g. torchrun's summary block)
        for m in self._extractor.finditer(line[:MAX_EXTRACT_CHARS]):
            for key, value in m.groupdict().items():
                if value not in (None, "") and key not in found:
                    found[key] = value
            if len(found) >= len(self.fields) > 0:
                break
        return found


class Catalogue(BaseModel):
    """A version number and the patterns, in file order."""

    model_config = ConfigDict(frozen=True)

    version: int
    patterns: list[PatternSpec]

    def by_id(self) -> dict[str, PatternSpec]:
        return {p.id: p for p in self.patterns}

    def get(self, pattern_id: str) -> PatternSpec | None:
        return self.by_id().get(pattern_id)

    @property
    def benign_patterns(self) -> list[PatternSpec]:
        return [p for p in self.patterns if p.benign]

    def benign_line(self, line: str) -> bool:
        """Whether a harmless look-alike explains `line` (then its other matches mean nothing)."""
        return any(p.matches(line) for p in self.benign_patterns)

    @property
    def screen_patterns(self) -> list[PatternSpec]:
        """The patterns worth screening for (benign look-alikes are checked only on flagged lines)."""
        return [p for p in self.patterns if not p.benign]


def load_catalogue(path: Path | None = None) -> Catalogue:
    """Load and validate a catalogue file (default: the packaged `patterns.toml`); cached per path."""
    return _load(Path(path).resolve() if path is not None else DEFAULT_PATH.resolve())


@lru_cache(maxsize=8)
def _load(path: Path) -> Catalogue:
    try:
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"pattern catalogue {path} does not exist; pass an existing TOML file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"pattern catalogue {path} is not valid TOML: {exc}") from exc
    version = raw.get("version")
    if not isinstance(version, int) or version < 1:
        raise ConfigError(f"pattern catalogue {path}: `version = N` (a positive integer) is required at the top")
    entries = raw.get("pattern")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"pattern catalogue {path}: no [[pattern]] tables found")
    patterns: list[PatternSpec] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        name = entry.get("id", f"#{index + 1}") if isinstance(entry, dict) else f"#{index + 1}"
        try:
            spec = PatternSpec.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"pattern {name!r} in {path}: {problems}") from exc
        if spec.id in seen:
            raise ConfigError(f"pattern {spec.id!r} in {path}: duplicate id; ids must be unique")
        seen.add(spec.id)
        try:
            spec.compile()
        except re.error as exc:
            raise ConfigError(f"pattern {spec.id!r} in {path}: expression does not compile: {exc}") from exc
        if spec.extract:
            groups = set(spec._extractor.groupindex) if spec._extractor else set()
            missing = set(spec.fields) - groups
            if missing:
                raise ConfigError(
                    f"pattern {spec.id!r} in {path}: fields {sorted(missing)} have no named group in `extract`"
                )
        if spec.benign != (spec.severity == "benign"):
            raise ConfigError(f"pattern {spec.id!r} in {path}: benign = true goes with severity = 'benign' and only with it")
        patterns.append(spec)
    return Catalogue(version=version, patterns=patterns)
