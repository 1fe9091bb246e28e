"""The Temporal UI as jobmedic's console, checked the way a person looks at it.

One real job fails on a bad GPU and is recovered on real Slurm by the real worker.
Then, on the dev server's Web UI (port 8233):

* its own JSON API (what the UI's pages are built from) gives the workflow's static
  summary and details, a one-line summary on every activity (`hold job 12 -
  gpu_hardware on node2`, `exclude node2 from job 12`, ...), and current details
  that say the phase and the last anomaly;
* routine checkpoints do not put one activity each on the timeline;
* headless Chromium (Debian's package, installed by deploy/chromium/install.sh)
  renders the job's page to a PNG (deploy/console/screenshot.sh);
* `jobmedic jobs` links the job to that page.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.workflows.harness import REPO, Scenario, WorkerProcess, slurm_state, submit_training, wait_for
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(400)]


def _text(payload: dict | None) -> str:
    """A Temporal payload (JSON-encoded string) as the UI's API gives it: base64 data."""
    if not payload or "data" not in payload:
        return ""
    return json.loads(base64.b64decode(payload["data"]))


async def test_a_recovered_jobs_page_reads_as_the_incident(
    scenario: Scenario, worker: WorkerProcess, tmp_path: Path, temporal_server
) -> None:
    worker.start()
    job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok",
                             iterations=160, fail_at=40)
    scenario.jobs.append(job_id)
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=200, what="recovered and completed")
    entries = await wait_for(
        lambda: scenario.entries(job_id) if EventType.COMPLETED in scenario.kinds(job_id) else None,
        timeout=60, what="the completed entry",
    )
    kinds = Counter(e.event_type for e in entries)
    assert kinds[EventType.CHECKPOINT_SAVED] >= 6, kinds  # a run long enough to have routine checkpoints
    bad = next(e for e in entries if e.event_type is EventType.ADVICE).implicated_nodes[0]
    wid = entries[0].workflow_id
    ns = temporal_server.namespace
    ui = temporal_server.ui_url.rstrip("/")

    with httpx.Client(base_url=ui, timeout=20) as http:
        described = http.get(f"/api/v1/namespaces/{ns}/workflows/{wid}").json()
        meta = described["executionConfig"]["userMetadata"]
        summary, details = _text(meta.get("summary")), _text(meta.get("details"))
        assert summary.startswith(f"job {job_id} jm-e2e (") and " on " in summary, summary
        assert "**mode**: opt-in action" in details and f"**job**: {job_id} jm-e2e" in details, details

        history = http.get(f"/api/v1/namespaces/{ns}/workflows/{wid}/history", params={"maximumPageSize": 1000}).json()
        events = history["history"]["events"]
        scheduled = [e for e in events if "activityTaskScheduledEventAttributes" in e]
        said = [(e["activityTaskScheduledEventAttributes"]["activityType"]["name"],
                 _text((e.get("userMetadata") or {}).get("summary"))) for e in scheduled]
        assert all(text for _, text in said), [s for s in said if not s[1]]  # every activity says what it does
        lines = [text for _, text in said]
        assert any(t.startswith(f"hold job {job_id} - gpu_hardware on {bad}") for t in lines), lines
        assert f"exclude {bad} from job {job_id}" in lines and f"release job {job_id}" in lines, lines
        assert any(t.startswith(f"collect evidence: job {job_id} failed") for t in lines), lines
        # routine checkpoints ride in batches: far fewer audit activities than checkpoints
        only_checkpoints = [t for t in lines if t == "audit: checkpoint_saved"]
        assert len(only_checkpoints) <= 2, lines  # the first checkpoint of each attempt, at most
        audits = [t for t in lines if t.startswith("audit: ")]
        assert len(audits) < kinds.total() / 2, (len(audits), kinds)

        # current details, as the UI reads them (the SDK's built-in metadata query; the UI's POSTs carry
        # the CSRF token of its cookie in a header, as its own pages do)
        csrf = http.cookies.get("_csrf") or http.get("/api/v1/settings").cookies.get("_csrf") or ""
        query = http.post(
            f"/api/v1/namespaces/{ns}/workflows/{wid}/query/__temporal_workflow_metadata",
            json={"execution": {"workflowId": wid}, "query": {"queryType": "__temporal_workflow_metadata"}},
            headers={"X-CSRF-TOKEN": csrf},
        )
        assert query.status_code == 200, query.text
        result = query.json()["queryResult"]["payloads"][0]
        current = json.loads(base64.b64decode(result["data"]))
        text = current.get("currentDetails", "")
        assert "phase **done**" in text and "last anomaly: **gpu_hardware**" in text and f"excluded: {bad}" in text, text

    shot = tmp_path / "job-page.png"
    env = {**os.environ, "JOBMEDIC_TEMPORAL__UI_URL": ui, "JOBMEDIC_TEMPORAL__NAMESPACE": ns}
    run = subprocess.run(["bash", str(REPO / "deploy/console/screenshot.sh"), wid, str(shot)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, len(data)  # a rendered page, not a blank
    keep = os.environ.get("JOBMEDIC_CONSOLE_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)

    listed = json.loads(scenario.cli("jobs", "--all", "--json", "--cluster", scenario.cluster).stdout)["jobs"]
    row = next(r for r in listed if r["job_id"] == job_id)
    assert row["page"] == f"{ui}/namespaces/{ns}/workflows/{wid}", row
