"""`jobmedic release JOB` / `jobmedic release --event ID`: end jobmedic's systemic hold of a job, or of every job held
for one systemic event.

A systemic hold (workflows/systemic_guard.py) ends by itself when the cause
clears or after `systemic_hold_max_s`; this is the operator's way to end it
sooner. Only jobmedic's own hold is released (the mark on the job says whose a
hold is); the job then runs again under normal scheduling.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from workers.settings import Settings
from workflows.messages import JobStatus, QueryNames, SignalNames
from workflows.systemic_guard import GuardNames, ReleaseOrder, SystemicEvent, guard_workflow_id


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "release",
        help="release jobmedic's systemic hold of a job, or of every job held for one systemic event",
        description=__doc__,
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("job", nargs="?", metavar="JOB", help="Slurm job id, or the workflow id")
    which.add_argument("--event", metavar="ID", help="a systemic event id (see `jobmedic release --list`)")
    which.add_argument("--list", action="store_true", help="list the cluster's systemic events")
    p.add_argument("--cluster", help="cluster of the job or event (default: the only/first configured cluster)")
    p.set_defaults(handler=cmd_release)


def cmd_release(args: argparse.Namespace, settings: Settings) -> int:
    return asyncio.run(_release(settings, args))


async def _release(settings: Settings, args: argparse.Namespace) -> int:
    from temporalio.service import RPCError

    from workers.commands.recovery import resolve_workflow_id
    from workers.temporal_client import connect

    client = await connect(settings)
    cluster = settings.cluster(args.cluster).name
    if args.job:
        workflow_id = await resolve_workflow_id(client, settings, args.job, cluster=args.cluster)
        if workflow_id is None:
            print(f"jobmedic: no running recovery workflow for job {args.job}; `jobmedic jobs` lists them",
                  file=sys.stderr)
            return 1
        handle = client.get_workflow_handle(workflow_id)
        status = await handle.query(QueryNames.STATUS, result_type=JobStatus)
        if not status.systemic_event:
            print(f"jobmedic: job {status.job_id} is not held by jobmedic for a systemic event "
                  f"(phase {status.phase}); nothing to release", file=sys.stderr)
            return 1
        await handle.signal(SignalNames.RELEASE, "jobmedic release")
        print(f"release sent to {workflow_id} (systemic event {status.systemic_event})")
        return 0
    guard = client.get_workflow_handle(guard_workflow_id(cluster))
    try:
        events = await guard.query(GuardNames.EVENTS, result_type=list[SystemicEvent])
    except RPCError as exc:
        print(f"jobmedic: no systemic guard running for cluster {cluster!r} ({exc.message}); no job is held for a "
              "systemic event", file=sys.stderr)
        return 1
    if args.list:
        for e in events:
            state = f"ended {e.closed_at:%Y-%m-%d %H:%M:%S}: {e.close_reason}" if e.closed_at else "open"
            print(f"{e.event_id}  {e.kind.value:<12} {len(e.members):>3} jobs  {state}\n    {e.reason}")
        if not events:
            print("no systemic events")
        return 0
    event = next((e for e in events if e.event_id == args.event), None)
    if event is None or event.closed_at is not None:
        known = ", ".join(e.event_id for e in events if e.closed_at is None) or "none open"
        print(f"jobmedic: no open systemic event {args.event!r} on cluster {cluster!r} (open: {known})",
              file=sys.stderr)
        return 1
    await guard.signal(GuardNames.RELEASE_EVENT, ReleaseOrder(event_id=event.event_id, reason="released by an operator"))
    print(f"release sent for systemic event {event.event_id}: {len(event.members)} held job(s)")
    return 0
