"""An optional external attribution service, and how its verdict is merged with ours.

The service gets one JSON POST:
`{"job": <JobInfo|null>, "evidence": <JobEvidence without job>, "local_verdict": <Verdict>}`
and answers `{"category", "fault_domain", "implicated": {"hosts", "ranks", "gpus"},
"confidence", "explanation"}` (or HTTP 204 / `null`: no opinion). Everything that
goes wrong - no answer within the bound, HTTP errors, junk, a category outside
jobmedic's taxonomy - raises `AttributionServiceError`; the caller goes on with its
own verdict, so the service can never hold up recovery.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from adapters.errors import AttributionServiceError
from workflows.contracts import Category, EvidenceLine, FaultDomain, Implicated, JobEvidence, Verdict

MAX_ANSWER_BYTES = 1024 * 1024
MAX_EXPLANATION_CHARS = 4000


class _Answer(BaseModel):
    """The service's verdict, checked strictly: a value outside our taxonomy is an error."""

    model_config = ConfigDict(extra="ignore")

    category: Category
    fault_domain: FaultDomain = FaultDomain.UNKNOWN
    implicated: Implicated = Field(default_factory=Implicated)
    confidence: float = Field(ge=0.0, le=1.0)
    explanation: str = ""


class AttributionClient:
    """Asks an external attribution service for its verdict.

    Args:
        url: the endpoint that takes the POST.
        timeout_s: bound on the whole exchange (connect, send, wait, read).
        bearer_token: sent as `Authorization: Bearer ...` when set.
        max_log_lines: only the newest lines of the evidence window are sent.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 5.0,
        bearer_token: str | SecretStr | None = None,
        max_log_lines: int = 1000,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.max_log_lines = max_log_lines
        token = bearer_token.get_secret_value() if isinstance(bearer_token, SecretStr) else bearer_token
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._transport = transport

    def request_body(self, evidence: JobEvidence, local: Verdict) -> dict[str, Any]:
        """The JSON document POSTed for one job."""
        sent = evidence.model_dump(mode="json", exclude={"job"})
        lines = sent.get("log_lines") or []
        if len(lines) > self.max_log_lines:
            dropped = len(lines) - self.max_log_lines
            sent["log_lines"] = lines[dropped:]
            sent["log_first_line_no"] = evidence.log_first_line_no + dropped
        return {
            "job": evidence.job.model_dump(mode="json") if evidence.job else None,
            "evidence": sent,
            "local_verdict": local.model_dump(mode="json", exclude={"external"}),
        }

    async def attribute(self, evidence: JobEvidence, local: Verdict) -> Verdict | None:
        """The service's verdict, or None when it has no opinion; raises AttributionServiceError."""
        body = self.request_body(evidence, local)
        try:
            async with asyncio.timeout(self.timeout_s):
                status, raw = await self._post(body)
        except TimeoutError as exc:
            raise AttributionServiceError(
                f"attribution service {self.url} did not answer within {self.timeout_s:g} s"
            ) from exc
        except httpx.HTTPError as exc:
            raise AttributionServiceError(f"attribution service {self.url} unreachable: {type(exc).__name__}: {exc}") from exc
        if status == 204:
            return None
        if not 200 <= status < 300:
            raise AttributionServiceError(f"attribution service {self.url} answered HTTP {status}: {raw[:200]!r}")
        try:
            parsed = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise AttributionServiceError(f"attribution service {self.url} answered non-JSON: {raw[:200]!r}") from exc
        if parsed is None:
            return None
        try:
            answer = _Answer.model_validate(parsed)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors()[:5])
            raise AttributionServiceError(f"attribution service {self.url} answered an invalid verdict: {problems}") from exc
        return Verdict(
            category=answer.category,
            fault_domain=answer.fault_domain,
            implicated=answer.implicated,
            confidence=answer.confidence,
            explanation=answer.explanation[:MAX_EXPLANATION_CHARS],
        )

    async def _post(self, body: dict[str, Any]) -> tuple[int, bytes]:
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=self._headers, transport=self._transport) as client:
            async with client.stream("POST", self.url, json=body) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise AttributionServiceError(
                            f"attribution service {self.url} answered more than {MAX_ANSWER_BYTES} bytes"
                        )
                    chunks.append(chunk)
                return response.status_code, b"".join(chunks)


def _union(first: list, second: list) -> list:
    out = list(first)
    out += [x for x in second if x not in out]
    return out


def merge_verdicts(local: Verdict, external: Verdict) -> Verdict:
    """Our verdict, informed by the external one (pure).

    * Same category: implicated hosts, ranks and GPUs are united, the confidence is
      the higher of the two, an unknown fault domain is filled in.
    * Different category: the external verdict wins only with a strictly higher
      confidence; its implicated set replaces ours (never mixed across causes).
    * Always: the external verdict is recorded in `Verdict.external`.
    """
    merged = local.model_copy(deep=True)
    merged.external = external.model_dump(mode="json", exclude={"external"})
    if external.category == local.category:
        merged.implicated = Implicated(
            hosts=_union(local.implicated.hosts, external.implicated.hosts),
            ranks=_union(local.implicated.ranks, external.implicated.ranks),
            gpus=_union(local.implicated.gpus, external.implicated.gpus),
        )
        merged.confidence = max(local.confidence, external.confidence)
        if merged.fault_domain is FaultDomain.UNKNOWN:
            merged.fault_domain = external.fault_domain
        if external.explanation:
            merged.evidence.append(EvidenceLine(source="external", line=external.explanation[:500]))
    elif external.confidence > local.confidence:
        merged.category = external.category
        merged.fault_domain = external.fault_domain
        merged.implicated = external.implicated.model_copy(deep=True)
        merged.confidence = external.confidence
        merged.deterministic_signature = None  # it described the cause we no longer believe
        merged.explanation = (
            f"{external.explanation} (external attribution service, confidence {external.confidence:.2f}; "
            f"jobmedic's own analysis said {local.category.value} with confidence {local.confidence:.2f}"
            + (f": {local.explanation})" if local.explanation else ")")
        )
        if external.explanation:
            merged.evidence.append(EvidenceLine(source="external", line=external.explanation[:500]))
    return merged
