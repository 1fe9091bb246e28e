"""Log-store test fixtures: a real HTTP server answering as the test says (tests/fake_http.py), Go unquoting."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer

import pytest

from tests.fake_http import Handler, base_url, serve, stop


@pytest.fixture
def http_service() -> Iterator[Callable[[Handler], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(handle: Handler) -> str:
        servers.append(serve(handle))
        return base_url(servers[-1])

    yield start
    for server in servers:
        stop(server)


def _go_unquote(token: str) -> str:
    """Unquote a Go double-quoted string literal, as Loki's and VictoriaLogs' parsers do."""
    assert token[0] == '"' and token[-1] == '"', token
    out: list[str] = []
    i, s = 1, token
    simple = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}
    while i < len(s) - 1:
        ch = s[i]
        if ch == "\n":
            raise ValueError("newline in string")
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = s[i + 1]
        if esc in simple:
            out.append(simple[esc])
            i += 2
        elif esc == "x":
            out.append(chr(int(s[i + 2 : i + 4], 16)))
            i += 4
        elif esc == "u":
            out.append(chr(int(s[i + 2 : i + 6], 16)))
            i += 6
        elif esc == "U":
            out.append(chr(int(s[i + 2 : i + 10], 16)))
            i += 10
        elif esc in "01234567":
            out.append(chr(int(s[i + 1 : i + 4], 8)))
            i += 4
        else:
            raise ValueError(f"unknown escape \\{esc}")
    return "".join(out)


@pytest.fixture
def go_unquote() -> Callable[[str], str]:
    """Go's string unquoting, for fakes that parse LogQL/LogsQL strictly."""
    return _go_unquote
