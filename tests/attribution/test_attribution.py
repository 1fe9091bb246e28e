"""AttributionClient against real HTTP servers started by the test, and merge_verdicts."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer

import pytest

from adapters.attribution import AttributionClient, merge_verdicts
from adapters.errors import AttributionServiceError
from tests.fake_http import Request, base_url, serve, stop
from workflows.contracts import (
    Category,
    EvidenceLine,
    FaultDomain,
    Implicated,
    JobEvidence,
    JobInfo,
    Verdict,
)

Answer = Callable[[dict], tuple[int, bytes]]


def evidence() -> JobEvidence:
    return JobEvidence(
        job=JobInfo(job_id="4242", cluster="c1", nodes=["node1", "node2", "node3"]),
        log_lines=[f"[rank{i}] step 100" for i in range(5)] + ["[rank5]: Watchdog caught collective operation timeout"],
        metric_facts=[EvidenceLine(source="metrics", host="node3", line="node3 GPU 2 (00000000:3B:00.0): Xid 79 reported by DCGM")],
    )


LOCAL = Verdict(
    category=Category.NCCL_TIMEOUT,
    fault_domain=FaultDomain.NETWORK,
    implicated=Implicated(hosts=["node2"], ranks=[5]),
    confidence=0.55,
    explanation="rank 5 timed out in an allreduce",
    deterministic_signature="nccl-timeout-allreduce",
)


@pytest.fixture
def service() -> Iterator[Callable[[Answer], str]]:
    """Starts an HTTP service whose answer the test supplies; records what it was sent."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Answer) -> str:
        def handle(req: Request) -> tuple[int, str, bytes]:
            if req.method != "POST" or req.path != "/v1/attribute" or req.headers.get("Authorization") != "Bearer s3cret":
                return 403, "text/plain", b"forbidden"
            assert req.headers.get("Content-Type") == "application/json"
            status, payload = answer(json.loads(req.body))
            return status, "application/json", payload

        servers.append(serve(handle))
        return base_url(servers[-1]) + "/v1/attribute"

    yield start
    for s in servers:
        stop(s)


def xid_expert(body: dict) -> tuple[int, bytes]:
    """A service that blames the host of a Xid fact, if the request carries everything it should."""
    assert set(body) == {"job", "evidence", "local_verdict"}
    assert body["job"]["job_id"] == "4242"
    assert body["local_verdict"]["category"] == "nccl_timeout"
    assert "job" not in body["evidence"]
    hosts = [f["host"] for f in body["evidence"]["metric_facts"] if "Xid 79" in f["line"]]
    return 200, json.dumps({
        "category": "gpu_hardware",
        "fault_domain": "hardware",
        "implicated": {"hosts": hosts, "gpus": [f"{h}:00000000:3B:00.0" for h in hosts]},
        "confidence": 0.9,
        "explanation": "Xid 79 on node3 GPU 2 preceded the collective timeout",
        "model_version": "2026.11",
    }).encode()


async def test_a_good_answer_becomes_a_verdict(service: Callable[[Answer], str]) -> None:
    client = AttributionClient(service(xid_expert), timeout_s=5, bearer_token="s3cret")
    verdict = await client.attribute(evidence(), LOCAL)
    assert verdict is not None
    assert verdict.category is Category.GPU_HARDWARE
    assert verdict.fault_domain is FaultDomain.HARDWARE
    assert verdict.implicated.hosts == ["node3"]
    assert verdict.confidence == 0.9


async def test_no_opinion_is_none(service: Callable[[Answer], str]) -> None:
    assert await AttributionClient(service(lambda b: (204, b"")), bearer_token="s3cret").attribute(evidence(), LOCAL) is None
    assert await AttributionClient(service(lambda b: (200, b"null")), bearer_token="s3cret").attribute(evidence(), LOCAL) is None


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda b: (500, b'{"error": "model crashed"}'), "HTTP 500"),
        (lambda b: (503, b"<html>busy</html>"), "HTTP 503"),
        (lambda b: (200, b"{not json"), "non-JSON"),
        (lambda b: (200, json.dumps({"category": "cosmic_rays", "confidence": 0.99}).encode()), "invalid verdict"),
        (lambda b: (200, json.dumps({"category": "gpu_hardware", "confidence": 7}).encode()), "invalid verdict"),
        (lambda b: (200, json.dumps({"category": "gpu_hardware", "fault_domain": "gremlins", "confidence": 0.5}).encode()), "invalid verdict"),
        (lambda b: (200, json.dumps(["gpu_hardware"]).encode()), "invalid verdict"),
    ],
)
async def test_bad_answers_raise(service: Callable[[Answer], str], answer: Answer, message: str) -> None:
    client = AttributionClient(service(answer), timeout_s=5, bearer_token="s3cret")
    with pytest.raises(AttributionServiceError, match=message):
        await client.attribute(evidence(), LOCAL)


async def test_wrong_token_is_an_error(service: Callable[[Answer], str]) -> None:
    client = AttributionClient(service(xid_expert), timeout_s=5, bearer_token="wrong")
    with pytest.raises(AttributionServiceError, match="HTTP 403"):
        await client.attribute(evidence(), LOCAL)


async def test_a_service_that_never_answers_is_cut_off_in_time() -> None:
    # accepts connections (the kernel completes the handshake) but never reads or answers
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        client = AttributionClient(f"http://127.0.0.1:{silent.getsockname()[1]}/v1/attribute", timeout_s=0.5)
        began = time.monotonic()
        with pytest.raises(AttributionServiceError, match="did not answer within 0.5 s"):
            await client.attribute(evidence(), LOCAL)
        assert time.monotonic() - began < 2.0
    finally:
        silent.close()


async def test_unreachable_service_is_an_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(AttributionServiceError, match="unreachable"):
        await AttributionClient(f"http://127.0.0.1:{port}/", timeout_s=2).attribute(evidence(), LOCAL)


def test_request_body_keeps_only_the_newest_log_lines() -> None:
    ev = evidence()
    ev.log_lines = [f"line {i}" for i in range(50)]
    ev.log_first_line_no = 101
    body = AttributionClient("http://unused", max_log_lines=10).request_body(ev, LOCAL)
    assert body["evidence"]["log_lines"] == [f"line {i}" for i in range(40, 50)]
    assert body["evidence"]["log_first_line_no"] == 141
    json.dumps(body)  # plain JSON all the way down


# --------------------------------------------------------------------------- merge


def ext(category: Category, confidence: float, hosts: list[str], domain: FaultDomain = FaultDomain.UNKNOWN) -> Verdict:
    return Verdict(
        category=category,
        fault_domain=domain,
        implicated=Implicated(hosts=hosts),
        confidence=confidence,
        explanation="external says so",
    )


def test_more_confident_external_verdict_wins_and_replaces_the_hosts() -> None:
    merged = merge_verdicts(LOCAL, ext(Category.GPU_HARDWARE, 0.9, ["node3"], FaultDomain.HARDWARE))
    assert merged.category is Category.GPU_HARDWARE
    assert merged.fault_domain is FaultDomain.HARDWARE
    assert merged.implicated.hosts == ["node3"]
    assert merged.confidence == 0.9
    assert merged.deterministic_signature is None
    assert "nccl_timeout" in merged.explanation
    assert merged.external is not None and merged.external["category"] == "gpu_hardware"
    assert merged.evidence[-1].source == "external"


def test_less_confident_disagreeing_external_verdict_is_only_recorded() -> None:
    merged = merge_verdicts(LOCAL, ext(Category.APP_ERROR, 0.5, ["node1"]))
    assert merged.category is LOCAL.category
    assert merged.implicated.hosts == ["node2"]
    assert merged.confidence == LOCAL.confidence
    assert merged.deterministic_signature == LOCAL.deterministic_signature
    assert merged.external is not None and merged.external["category"] == "app_error"
    assert merged.evidence == LOCAL.evidence


def test_agreeing_verdicts_unite_the_implicated_hosts() -> None:
    other = ext(Category.NCCL_TIMEOUT, 0.7, ["node3", "node2"])
    other.implicated.ranks = [5, 11]
    merged = merge_verdicts(LOCAL, other)
    assert merged.category is Category.NCCL_TIMEOUT
    assert merged.implicated.hosts == ["node2", "node3"]
    assert merged.implicated.ranks == [5, 11]
    assert merged.confidence == 0.7
    assert merged.fault_domain is FaultDomain.NETWORK  # ours was known: kept


def test_merge_does_not_modify_its_inputs() -> None:
    before = LOCAL.model_dump()
    merge_verdicts(LOCAL, ext(Category.NCCL_TIMEOUT, 0.9, ["node7"]))
    assert LOCAL.model_dump() == before
