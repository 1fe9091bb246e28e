"""A tiny real HTTP server for the log-store tests: the test supplies the request handler."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]  # from the URL
    form: dict[str, list[str]]  # from an x-www-form-urlencoded body
    headers: dict[str, str]
    body: bytes


# returns (status, content type, body)
Handler = Callable[[Request], tuple[int, str, bytes]]


@pytest.fixture
def http_service() -> Iterator[Callable[[Handler], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(handle: Handler) -> str:
        class RequestHandler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                form: dict[str, list[str]] = {}
                if self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
                    form = parse_qs(body.decode(), keep_blank_values=True, strict_parsing=bool(body))
                request = Request(
                    method=self.command,
                    path=parts.path,
                    query=parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query)),
                    form=form,
                    headers={k: v for k, v in self.headers.items()},
                    body=body,
                )
                status, content_type, payload = handle(request)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _serve  # noqa: N815
            do_POST = _serve  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


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
