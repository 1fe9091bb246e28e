"""A job's log lines from Grafana Loki.

Followed: Loki's HTTP API, `GET /loki/api/v1/query_range` (grafana.com/docs/loki,
"Query logs within a range of time"): parameters `query` (LogQL), `start` and `end`
as nanosecond Unix epochs, `limit` (Loki's default 100, capped by the server's
`max_entries_limit_per_query`, 5000 by default), `direction` (`forward` or
`backward`); the answer `{"status": "success", "data": {"resultType": "streams",
"result": [{"stream": {<labels>}, "values": [["<ns>", "<line>"], ...]}]}}`; errors
as a non-2xx status with a plain-text body; `X-Scope-OrgID` names the tenant of a
multi-tenant Loki. The LogQL stream selector `{label="value"}` takes Go-style
double-quoted strings, so the job id is always escaped, never pasted.

Paging (as logcli does): a full page moves `start` (forward) or `end` (backward)
to the last timestamp seen, and entries already returned at that timestamp are
dropped from the next page.
"""

from __future__ import annotations

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
    quoted,
    records,
    to_ns,
)

#: Loki refuses larger pages unless its operator raised max_entries_limit_per_query
LOKI_MAX_PAGE = 5000


class LokiLogSource:
    """Reads a job's lines from Loki by the label that carries the Slurm job id.

    Args:
        url: Loki base URL, e.g. `http://loki:3100`.
        job_label: label holding the job id (`slurm_job_id`).
        host_label: label holding the node name, copied to `LogRecord.host`.
        extra_selector: more matchers for the stream selector, from the operator's
            configuration (e.g. `cluster="a100"`); written into the selector as is.
        timeout_s: bound on each HTTP request.
        bearer_token: sent as `Authorization: Bearer ...` when set.
        tenant: sent as `X-Scope-OrgID` when set.
        page_size: entries asked for per request.
    """

    PATH = "/loki/api/v1/query_range"

    def __init__(
        self,
        url: str,
        *,
        job_label: str = "slurm_job_id",
        host_label: str = "host",
        extra_selector: str = "",
        timeout_s: float = 10.0,
        bearer_token: str | SecretStr | None = None,
        tenant: str | None = None,
        page_size: int = 1000,
        max_line_bytes: int = 64 * 1024,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.job_label = check_label_name(job_label, setting="logs.job_label")
        self.host_label = host_label
        self.extra_selector = extra_selector.strip().strip(",").strip()
        self.timeout_s = timeout_s
        self.page_size = max(1, min(page_size, LOKI_MAX_PAGE))
        self.max_line_bytes = max_line_bytes
        self._headers = {"Accept": "application/json", **bearer_headers(bearer_token)}
        if tenant:
            self._headers["X-Scope-OrgID"] = tenant
        self._transport = transport

    def selector(self, job_id: str) -> str:
        """The LogQL stream selector of one job."""
        matchers = [f"{self.job_label}={quoted(job_id)}"]
        if self.extra_selector:
            matchers.append(self.extra_selector)
        return "{" + ", ".join(matchers) + "}"

    async def query(
        self, job_id: str, *, start: datetime, end: datetime, limit: int, direction: Direction = "forward"
    ) -> list[LogRecord]:
        """At most `limit` entries of the job in [start, end), oldest first (see `JobLogStore`)."""
        selector = self.selector(job_id)
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=self._headers, transport=self._transport) as client:

            async def fetch(lo: int, hi: int, page: int) -> list[Entry]:
                params = {"query": selector, "start": str(lo), "end": str(hi), "limit": str(page), "direction": direction}
                return await self._get(client, params)

            return await page_through(
                fetch, lo=to_ns(start), hi=to_ns(end), limit=limit, page_size=self.page_size, direction=direction, store="Loki"
            )

    async def _get(self, client: httpx.AsyncClient, params: dict[str, str]) -> list[Entry]:
        """One page: its entries across streams in the order of `direction`, each keyed (ns, labels, line) for dedupe.

        A multi-line entry (a stack trace pushed whole) gives several records under one key.
        """
        where = f"Loki at {self.url}"
        try:
            response = await client.get(self.url + self.PATH, params=params)
        except httpx.HTTPError as exc:
            raise LogSourceError(f"{where} did not answer ({type(exc).__name__}: {exc}); check logs.url") from exc
        if response.status_code != 200:
            raise LogSourceError(f"{where} answered HTTP {response.status_code}: {response.text[:300]}")
        try:
            body: Any = response.json()
            data = body["data"]
            if body.get("status") != "success" or data.get("resultType") != "streams":
                raise LogSourceError(f"{where} answered status {body.get('status')!r}, resultType {data.get('resultType')!r}")
            out: list[Entry] = []
            for stream in data["result"]:
                labels = {str(k): str(v) for k, v in (stream.get("stream") or {}).items()}
                label_key = tuple(sorted(labels.items()))
                for value in stream.get("values") or []:
                    ns, line = int(value[0]), str(value[1])
                    recs = records(ns, line, labels, host_label=self.host_label, max_line_bytes=self.max_line_bytes)
                    out.append(((ns, label_key, line), recs))
        except LogSourceError:
            raise
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise LogSourceError(f"{where} answered something that is not a streams result: {response.text[:200]!r}") from exc
        out.sort(key=lambda item: item[0][0], reverse=params["direction"] == "backward")
        return out
