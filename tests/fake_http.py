"""A tiny real HTTP server for tests that fake an HTTP service: the test supplies the answer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]  # from the URL
    form: dict[str, list[str]]  # from an x-www-form-urlencoded body
    headers: dict[str, str]
    body: bytes


#: returns (status, content type, body)
Handler = Callable[[Request], tuple[int, str, bytes]]


def serve(handle: Handler) -> ThreadingHTTPServer:
    """Serves GET and POST on a free loopback port, in a daemon thread, until `stop`."""

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
    return server


def base_url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
