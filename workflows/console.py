"""What the Temporal UI shows of a recovery workflow before anyone opens its history.

The UI is jobmedic's console: an on-call engineer's first look at a job's page
should say whose job it is, where it runs and what jobmedic is allowed to do.
These pure functions write the workflow's static summary (one line, in the
workflow list and at the top of the page) and static details (Markdown, under
"User Metadata"); the workflow keeps its *current* details up to date itself.
"""

from __future__ import annotations

from workflows.contracts import JobInfo

SUMMARY_MAX = 200  # the UI shows one line; the server accepts more, nobody reads it


def recovery_summary(job: JobInfo) -> str:
    """`job 12 train-llama (alice) on node[1-2]`."""
    parts = [f"job {job.job_id}"]
    if job.name:
        parts.append(job.name)
    if job.user:
        parts.append(f"({job.user})")
    where = job.node_list or ",".join(job.nodes[:8])
    if where:
        parts.append(f"on {where}")
    text = " ".join(parts)
    return text if len(text) <= SUMMARY_MAX else text[: SUMMARY_MAX - 3] + "..."


def recovery_details(job: JobInfo, cluster_mode: str) -> str:
    """The job as jobmedic first saw it, and what it may do about it."""
    opt = job.opt_in.opt_in
    mode = f"opt-in {opt.mode}, cluster {cluster_mode}" if opt is not None else cluster_mode
    rows = [
        ("job", f"{job.job_id} {job.name}".strip()),
        ("user", job.user),
        ("cluster", job.cluster),
        ("nodes", job.node_list or ",".join(job.nodes)),
        ("submitted", job.submit_time.isoformat() if job.submit_time else ""),
        ("time limit", job.time_limit),
        ("output", job.stdout_path),
        ("mode", mode),
    ]
    if opt is not None and opt.max_attempts is not None:
        rows.append(("attempt budget", str(opt.max_attempts)))
    return "\n".join(f"**{name}**: {value}" for name, value in rows if value)
