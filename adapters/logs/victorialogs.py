"""A job's log lines from VictoriaLogs.

Followed: VictoriaLogs' querying docs (docs.victoriametrics.com/victorialogs/querying,
"Querying logs"): `/select/logsql/query` takes the LogsQL `query` in the URL or, as
here, in an `application/x-www-form-urlencoded` POST body; `start` and `end` bound
the `_time` range (RFC 3339 accepted); `limit=N` returns the N most recent matches;
the answer is a stream of JSON lines, one log entry each, with `_msg`, `_time`
(RFC 3339), `_stream` and the other fields, in no particular order unless the query
sorts. `AccountID`/`ProjectID` headers pick a tenant. And the LogsQL docs: the exact
filter `field:="value"`, quoted field names and values, `AND`, and the `sort by
(_time)` and `limit N` pipes.

Paging: backward (the newest N) uses the `limit` argument and moves `end` to the
oldest time seen; forward (the oldest N) sorts with `| sort by (_time) | limit N`
and moves `start` to the newest time seen; entries already returned at the
boundary time are dropped from the next page.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import httpx
from pydantic import SecretStr

from adapters.errors import LogSourceError
from adapters.logs.models import LogRecord
from adapters.logs.stores import (
    Direction,
    Entry,
    bearer_headers,
    check_label_name,
    page_through,
    parse_rfc3339_ns,
    quoted,
    records,
    rfc3339_ns,
    to_ns,
)

MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class VictoriaLogsSource:
    """Reads a job's lines from VictoriaLogs by the field that carries the Slurm job id.

    Args:
        url: VictoriaLogs base URL, e.g. `http://victorialogs:9428`.
        job_label: field holding the job id (`slurm_job_id`).
        host_label: field holding the node name, copied to `LogRecord.host`.
        extra_selector: a LogsQL filter from the operator's configuration ANDed to
            the job filter (e.g. `cluster:="a100"`); written into the query as is.
        timeout_s: bound on each HTTP request.
        bearer_token: sent as `Authorization: Bearer ...` when set.
        account_id, project_id: the tenant, when not (0, 0).
        page_size: entries asked for per request.
    """

    PATH = "/select/logsql/query"

    def __init__(
        self,
        url: str,
        *,
        job_label: str = "slurm_job_id",
        host_label: str = "host",
        extra_selector: str = "",
        timeout_s: float = 10.0,
        bearer_token: str | SecretStr | None = None,
        account_id: int | None = None,
        project_id: int | None = None,
        page_size: int = 1000,
        max_line_bytes: int = 64 * 1024,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.job_label = check_label_name(job_label, setting="logs.job_label")
        self.host_label = host_label
        self.extra_selector = extra_selector.strip()
        self.timeout_s = timeout_s
        self.page_size = max(1, page_size)
        self.max_line_bytes = max_line_bytes
        self._headers = {"Accept": "application/json", **bearer_headers(bearer_token)}
        if account_id is not None:
            self._headers["AccountID"] = str(account_id)
        if project_id is not None:
            self._headers["ProjectID"] = str(project_id)
        self._transport = transport

    def filter(self, job_id: str) -> str:
        """The LogsQL filter of one job."""
        exact = f"{quoted(self.job_label)}:={quoted(job_id)}"
        return f"{exact} AND ({self.extra_selector})" if self.extra_selector else exact

    async def query(
        self, job_id: str, *, start: datetime, end: datetime, limit: int, direction: Direction = "forward"
    ) -> list[LogRecord]:
        """At most `limit` entries of the job in [start, end], oldest first (see `JobLogStore`)."""
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=self._headers, transport=self._transport) as client:

            async def fetch(lo: int, hi: int, page: int) -> list[Entry]:
                # VictoriaLogs' `end` is inclusive; the pager's `hi` is not
                form = {"query": self.filter(job_id), "start": rfc3339_ns(lo), "end": rfc3339_ns(hi - 1)}
                if direction == "forward":
                    form["query"] += f" | sort by (_time) | limit {page}"
                else:
                    form["limit"] = str(page)
                entries = await self._post(client, form)
                entries.sort(key=lambda e: e[0][0], reverse=direction == "backward")
                return entries

            return await page_through(
                fetch,
                lo=to_ns(start),
                hi=to_ns(end) + 1,
                limit=limit,
                page_size=self.page_size,
                direction=direction,
                store="VictoriaLogs",
            )

    async def _post(self, client: httpx.AsyncClient, form: dict[str, str]) -> list[Entry]:
        """One page: its entries, each keyed (_time in ns, _stream, _msg) for dedupe."""
        where = f"VictoriaLogs at {self.url}"
        try:
            async with client.stream("POST", self.url + self.PATH, data=form) as response:
                if response.status_code != 200:
                    text = (await response.aread())[:300].decode("utf-8", errors="replace")
                    raise LogSourceError(f"{where} answered HTTP {response.status_code}: {text}")
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise LogSourceError(f"{where} answered more than {MAX_RESPONSE_BYTES} bytes for one page")
        except httpx.HTTPError as exc:
            raise LogSourceError(f"{where} did not answer ({type(exc).__name__}: {exc}); check logs.url") from exc
        out: list[Entry] = []
        for raw in bytes(body).splitlines():
            if not raw.strip():
                continue
            try:
                entry: Any = json.loads(raw)
                ns = parse_rfc3339_ns(str(entry["_time"]))
                msg = str(entry.get("_msg", ""))
                stream = str(entry.get("_stream", ""))
                labels = {
                    str(k): str(v) for k, v in entry.items() if k not in ("_msg", "_time", "_stream_id") and not isinstance(v, (dict, list))
                }
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise LogSourceError(f"{where} answered a line that is not a log entry: {raw[:200]!r}") from exc
            out.append(((ns, stream, msg), records(ns, msg, labels, host_label=self.host_label, max_line_bytes=self.max_line_bytes)))
        return out
