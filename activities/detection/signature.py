"""A failure's deterministic signature: its category and error text with hosts, addresses and numbers
stripped, hashed, so two attempts that fail the same way compare equal. Pure code."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from activities.detection.signals import EXCEPTION_PATTERNS, FALLBACK_PATTERNS, Signal
from workflows.contracts import Category

_SIGNED = {Category.APP_ERROR, Category.CUDA_ERROR, Category.GPU_OOM, Category.DATA_IO, Category.UNKNOWN}
_NORMALISE = [
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-9])?\b"), "<pci>"),
    (re.compile(r"\b[0-9]{1,3}(?:\.[0-9]{1,3}){3}(?::[0-9]+|<[0-9]+>)?"), "<ip>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"[0-9]+"), "#"),
    (re.compile(r"\s+"), " "),
]


def normalise_error_text(text: str, *, hosts: Iterable[str] = ()) -> str:
    """The error text with hosts, addresses and numbers stripped, so two attempts compare equal."""
    out = text[:2000]
    for host in sorted(set(hosts), key=len, reverse=True):
        if host:
            out = out.replace(host, "<host>")
    out = re.sub(r"\b[a-z][a-z0-9-]*[0-9][a-z0-9-]*(?:\.[a-z0-9.-]+)?\b", "<host>", out)
    for rx, repl in _NORMALISE:
        out = rx.sub(repl, out)
    return out.strip()


def signature(category: Category, primary: Signal | None, hosts: Iterable[str]) -> str | None:
    if category not in _SIGNED or primary is None:
        return None
    text = primary.note if primary.pattern_id in EXCEPTION_PATTERNS and primary.note else (primary.text or primary.line)
    if primary.pattern_id in FALLBACK_PATTERNS:
        text = primary.text  # the exception type, the signal, or the exit code and last line
    norm = normalise_error_text(text, hosts=hosts)
    if not norm:
        return None
    return hashlib.sha256(f"{category.value}|{norm}".encode("utf-8", "replace")).hexdigest()[:16]

