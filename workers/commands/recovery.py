"""`jobmedic worker`, `jobmedic jobs`, `jobmedic pause|resume|stop JOB`, `jobmedic dev`."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

from workers.settings import WORKER_ROLES, Settings
from workers.temporal_client import workflow_page
from workflows.messages import JobStatus, QueryNames, SignalNames, recovery_query


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "worker", help="run the Temporal worker for the configured clusters",
        description="Run the Temporal worker for the configured clusters. One process does everything by default; "
                    "one Python process uses one core, so a large deployment (thousands of watched jobs) runs one "
                    "process of each role, on one machine or several, with the same settings.",
    )
    p.add_argument("--role", choices=WORKER_ROLES, default="all",
                   help="all (default); workflows: the job workflows and their attribution and audit activities; "
                        "clusters: each cluster's watch and scheduler activities. Both roles must run somewhere")
    p.set_defaults(handler=cmd_worker)

    p = sub.add_parser("dev", help="embedded stack: Temporal dev server (if none runs) + worker + SQLite audit")
    p.add_argument("--ui-port", type=int, default=8233, help="port of the Temporal Web UI (default 8233)")
    p.set_defaults(handler=cmd_dev)

    p = sub.add_parser("jobs", help="monitored jobs with phase, attempts and last anomaly (from Temporal visibility)")
    p.add_argument("--cluster", help="only this cluster")
    p.add_argument("--all", action="store_true", help="include finished workflows")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=cmd_jobs)

    for name, sig, text in (
        ("pause", SignalNames.PAUSE, "pause recovery of a job (advice is still recorded, no action)"),
        ("resume", SignalNames.RESUME, "resume recovery of a paused job"),
        ("stop", SignalNames.STOP, "stop recovering a job (the job itself keeps running)"),
    ):
        p = sub.add_parser(name, help=text, description=f"{text}. Same as `temporal workflow signal --name {sig}`.")
        p.add_argument("job", metavar="JOB", help="Slurm job id, or the workflow id")
        p.add_argument("--cluster", help="cluster of the job (default: the only/first configured cluster)")
        p.set_defaults(handler=cmd_signal, signal_name=sig)


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from workers.temporal_client import connect
    from workers.worker import run_worker

    async def main() -> None:
        client = await connect(settings)
        await run_worker(settings, client, stop=_stop_on_signals(), role=args.role)

    asyncio.run(main())
    return 0


def cmd_dev(args: argparse.Namespace, settings: Settings) -> int:
    from loguru import logger

    from workers.devserver import port_open, start_dev_server
    from workers.temporal_client import connect
    from workers.worker import run_worker

    server = None
    if not port_open(settings.temporal.address):
        server = start_dev_server(data_dir=settings.data_dir, address=settings.temporal.address, ui_port=args.ui_port)
        logger.info("started the Temporal dev server (db {})", settings.data_dir / "temporal.db")
    print(f"Temporal UI: {settings.temporal.ui_url}/namespaces/{settings.temporal.namespace}/workflows", flush=True)
    print(f"audit trail: {settings.audit_url}", flush=True)

    async def main() -> None:
        client = await connect(settings)
        await run_worker(settings, client, stop=_stop_on_signals())

    try:
        asyncio.run(main())
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    return 0


def cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    rows = asyncio.run(_list_jobs(settings, cluster=args.cluster, include_closed=args.all))
    if args.json:
        print(json.dumps({"jobs": rows}, indent=2, default=str))
        return 0
    if not rows:
        print("no monitored jobs" + ("" if args.all else " running (use --all for finished ones)"))
        return 0
    header = (f"{'JOB':>10}  {'CLUSTER':<10} {'PHASE':<16} {'MODE':<8} {'ATT':>3}  {'LAST ANOMALY':<14} "
              f"{'IMPLICATED':<16} {'HANG WATCH':<24} PAGE")
    print(header)
    for r in rows:
        print(
            f"{r['job_id']:>10}  {r['cluster']:<10} {r['phase']:<16} {r['mode']:<8} {r['attempts']:>3}  "
            f"{r['last_category'] or '-':<14} {','.join(r['implicated_nodes']) or '-':<16} {r['hang_watch'] or '-':<24} "
            f"{r['page']}"
        )
    return 0


async def _list_jobs(settings: Settings, *, cluster: str | None, include_closed: bool) -> list[dict]:
    from workers.temporal_client import connect

    client = await connect(settings)
    rows: list[dict[str, Any]] = []
    async for wf in client.list_workflows(recovery_query(cluster=cluster or None, running=not include_closed)):
        sa = wf.search_attributes
        rows.append(
            {
                "workflow_id": wf.id,
                "job_id": _first(sa.get("JobId")),
                "cluster": _first(sa.get("Cluster")),
                "phase": _first(sa.get("Phase")) or "",
                "mode": _first(sa.get("Mode")) or "",
                "attempts": _first(sa.get("Attempts")) or 0,
                "last_category": _first(sa.get("LastCategory")) or "",
                "implicated_nodes": list(sa.get("ImplicatedNodes") or []),
                "status": wf.status.name if wf.status else "",
                "started": wf.start_time,
                "page": workflow_page(settings, wf.id),  # the job's page in the Temporal UI
            }
        )
    watch: dict[str, dict[str, Any]] = {}
    for name in sorted({str(r["cluster"]) for r in rows if r["cluster"]}):
        watch.update(await watched_jobs(client, name))  # a watch from before the watch_state table
        watch.update(await _stored_watch(settings, name))
    for r in rows:
        # what the cluster watch says about the job; "" when the watch has not seen it (or is not running)
        r["hang_watch"] = watch.get(r["workflow_id"], {}).get("hang_watch", "")
    return rows


async def watched_jobs(client, cluster: str) -> dict[str, dict]:
    """The cluster watch's view of each job (workflow id -> WatchedJob fields), from its activity's heartbeat.

    The watch records its state as heartbeat details every poll (activities/watch.py);
    an empty map when the watch is not running or has not heartbeated yet.
    """
    from workflows.cluster_watch import watch_workflow_id

    try:
        desc = await client.get_workflow_handle(watch_workflow_id(cluster)).describe()
    except Exception:  # noqa: BLE001 - no watch, no view: the listing still shows the rest
        return {}
    for pending in desc.raw_description.pending_activities:
        if not pending.heartbeat_details.payloads:
            continue
        try:
            details = await client.data_converter.decode(pending.heartbeat_details.payloads)
        except Exception:  # noqa: BLE001 - details of another version: not worth failing the listing
            continue
        jobs = details[0].get("jobs") if details and isinstance(details[0], dict) else None
        if isinstance(jobs, dict):
            return {wid: job for wid, job in jobs.items() if isinstance(job, dict)}
    return {}


async def _stored_watch(settings: Settings, cluster: str) -> dict[str, dict]:
    """The cluster watch's view of each job from its `watch_state` rows (empty when the store cannot be read)."""
    from activities.watch_state import watched_jobs_from_rows
    from adapters.errors import JobmedicError
    from workers.factories.audit import build_audit_store

    store = build_audit_store(settings)
    try:
        rows = await asyncio.to_thread(store.load_watch_state, cluster)
    except JobmedicError:
        return {}
    finally:
        store.close()
    return watched_jobs_from_rows(rows)


def _first(values) -> object:
    if isinstance(values, list | tuple):
        return values[0] if values else None
    return values


def cmd_signal(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_signal(settings, args.job, args.signal_name, cluster=args.cluster))


async def _signal(settings: Settings, job: str, name: str, *, cluster: str | None) -> int:
    from workers.temporal_client import connect

    client = await connect(settings)
    workflow_id = await resolve_workflow_id(client, settings, job, cluster=cluster)
    if workflow_id is None:
        print(f"jobmedic: no running recovery workflow for job {job}; `jobmedic jobs` lists them", file=sys.stderr)
        return 1
    handle = client.get_workflow_handle(workflow_id)
    await handle.signal(name)
    status = await handle.query(QueryNames.STATUS, result_type=JobStatus)
    print(f"{name} sent to {workflow_id}: phase {status.phase}, paused {status.paused}, stopped {status.stopped}")
    return 0


async def resolve_workflow_id(client, settings: Settings, job: str, *, cluster: str | None) -> str | None:
    """A workflow id as given, or the running recovery workflow of Slurm job `job`."""
    if job.startswith("jobmedic-"):
        return job
    query = recovery_query(cluster=settings.cluster(cluster).name, job_id=job)
    async for wf in client.list_workflows(query):
        return wf.id
    return None


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
