"""`jobmedic notify job-end` / `jobmedic notify node-down NODE...`: tell the cluster watch at once that Slurm saw
something, so it polls now instead of at its next interval.

Meant to be run by slurmctld: `job-end` as (or from) `EpilogSlurmctld`, which
passes the job in its environment (SLURM_JOB_ID, SLURM_ARRAY_JOB_ID /
SLURM_ARRAY_TASK_ID, SLURM_JOB_EXIT_CODE2, SLURM_JOB_DERIVED_EC,
SLURM_JOB_NODELIST, SLURM_JOB_COMMENT, SLURM_JOB_RESTART_COUNT; flags override
them); `node-down` by `strigger --set --node --down` (or `--drained`), which
passes the node list as its argument. It signals `poke` to the cluster's watch
workflow; the watch then runs its normal batched poll and signals the job's
workflow as it always does. The interval poll stays the safety net: a lost
notification only costs speed.

It must never slow down or break slurmctld: it gives up after `--timeout-s`
(a hard limit: the process exits when it is reached, whatever it is waiting
for), it always exits 0 (Slurm logs a failing EpilogSlurmctld as an error and
drains nothing, but a site should not see our trouble as its own) unless
`--strict` (tests), and nothing it reads goes near a shell. A job whose comment
holds no jobmedic opt-in is not sent (EpilogSlurmctld runs for every job).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from workers.settings import Settings

if TYPE_CHECKING:  # imported when used: slurmctld waits for this command, so it loads as little as it can
    from workflows.cluster_watch import WatchPoke

DEFAULT_TIMEOUT_S = 3.0
_JOB_ID = re.compile(r"^\d{1,12}(_\d{1,10})?$")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("notify", help="tell the cluster watch at once that a job ended or nodes went down "
                       "(for EpilogSlurmctld and strigger)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = p.add_subparsers(dest="notify_kind", metavar="EVENT", required=True)

    end = kinds.add_parser("job-end", help="a job ended (EpilogSlurmctld; reads SLURM_JOB_* from the environment)")
    end.add_argument("--job-id", help="the job (default: SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID or SLURM_JOB_ID)")
    end.add_argument("--exit-code", help="CODE:SIGNAL (default: SLURM_JOB_EXIT_CODE2)")
    end.add_argument("--derived-exit-code", help="worst step's exit code (default: SLURM_JOB_DERIVED_EC)")
    end.add_argument("--nodes", help="the job's nodes, a Slurm host list (default: SLURM_JOB_NODELIST)")
    end.add_argument("--comment", help="the job's comment, to skip jobs that did not opt in (default: "
                     "SLURM_JOB_COMMENT; when neither is set the poke is sent)")
    end.add_argument("--any-job", action="store_true", help="send even when the comment holds no opt-in")
    _common(end)

    down = kinds.add_parser("node-down", help="nodes went down or were drained (strigger --program)")
    down.add_argument("nodes", nargs="+", metavar="NODE", help="node names or Slurm host lists (node[1-3])")
    down.add_argument("--drained", action="store_true", help="the nodes were drained, not downed")
    _common(down)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", help="the cluster whose watch is poked (default: the only/first configured one)")
    p.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"give up after this many seconds, whatever happens (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--strict", action="store_true", help="exit 1 when the watch was not told (tests; never in Slurm)")
    p.set_defaults(handler=cmd_notify, on_config_error=_exit_code)


def _exit_code(args: argparse.Namespace) -> int:
    """What a failure exits with: 0 for Slurm, 1 under --strict."""
    return 1 if getattr(args, "strict", False) else 0


def cmd_notify(args: argparse.Namespace, settings: Settings) -> int:
    from loguru import logger

    _hard_deadline(args.timeout_s + 1.0, code=_exit_code(args))
    try:
        poke = build_poke(args, os.environ)
        if poke is None:
            return 0
        cluster = settings.cluster(args.cluster).name
        asyncio.run(asyncio.wait_for(_send(settings, cluster, poke, args.timeout_s), args.timeout_s))
    except Exception as exc:  # noqa: BLE001 - whatever it was, slurmctld must not pay for it
        reason = "timed out" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
        logger.warning("jobmedic notify {}: the watch was not told ({}); its interval poll will see it",
                       args.notify_kind, reason)
        return _exit_code(args)
    logger.info("jobmedic notify {}: poked the watch of cluster {} (jobs {}, nodes {})", poke.source, cluster,
                ",".join(poke.job_ids) or "-", ",".join(poke.nodes) or "-")
    return 0


def build_poke(args: argparse.Namespace, env: Mapping[str, str]) -> WatchPoke | None:
    """The poke to send, or None when there is nothing to say (a job that did not opt in).

    Raises ValueError for input that is not a job id or node name (it is never passed on).
    """
    from workflows.cluster_watch import WatchPoke

    now = datetime.now(timezone.utc)
    if args.notify_kind == "node-down":
        nodes = _nodes(args.nodes)
        return WatchPoke(source="node-drained" if args.drained else "node-down", nodes=nodes, sent_at=now)
    job_id = args.job_id or _env_job_id(env)
    if not job_id or not _JOB_ID.match(job_id):
        raise ValueError(f"no usable job id ({job_id!r}); pass --job-id or run from EpilogSlurmctld")
    comment = args.comment if args.comment is not None else env.get("SLURM_JOB_COMMENT")
    if comment is not None and not args.any_job and not _opted_in(comment):
        return None
    exit_code = args.exit_code or env.get("SLURM_JOB_EXIT_CODE2") or ""
    derived = args.derived_exit_code or env.get("SLURM_JOB_DERIVED_EC") or ""
    restarts = env.get("SLURM_JOB_RESTART_COUNT", "")
    detail = ", ".join(f"{k} {_clip(v)}" for k, v in
                       (("exit", exit_code), ("derived", derived), ("restarts", restarts)) if v)
    node_list = args.nodes if args.nodes is not None else env.get("SLURM_JOB_NODELIST", "")
    return WatchPoke(source="job-end", job_ids=[job_id], nodes=_nodes([node_list]) if node_list else [],
                     sent_at=now, detail=detail)


def _env_job_id(env: Mapping[str, str]) -> str:
    array, task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if array and task:
        return f"{array}_{task}"  # how the watch names an array task
    return env.get("SLURM_JOB_ID", "")


def _opted_in(comment: str) -> bool:
    from adapters.slurm.optin import parse_opt_in

    result = parse_opt_in(comment)
    return result.opt_in is not None or result.invalid  # an invalid opt-in is the watch's to audit


def _nodes(lists: list[str]) -> list[str]:
    from adapters.slurm import hostlist

    nodes: list[str] = []
    for item in lists:
        for name in hostlist.expand(item.strip()):
            if not _NODE.match(name):
                raise ValueError(f"not a node name: {_clip(name)!r}")
            nodes.append(name)
    return list(dict.fromkeys(nodes))


def _clip(value: str, limit: int = 40) -> str:
    return value if len(value) <= limit else value[:limit] + "..."


async def _send(settings: Settings, cluster: str, poke: WatchPoke, timeout_s: float) -> None:
    from temporalio.service import RPCError, RPCStatusCode

    from workers.temporal_client import connect
    from workflows.cluster_watch import WatchNames, watch_workflow_id

    client = await connect(settings)
    handle = client.get_workflow_handle(watch_workflow_id(cluster))
    try:
        await handle.signal(WatchNames.POKE, poke, rpc_timeout=timedelta(seconds=timeout_s))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise RuntimeError(f"no watch workflow {handle.id} is running; is `jobmedic worker` up for cluster "
                               f"{cluster!r}?") from exc
        raise


def _hard_deadline(seconds: float, *, code: int) -> None:
    """Exit when `seconds` have passed, whatever the process is waiting for (slurmctld waits for it)."""

    def expire(signum: int, frame: object) -> None:
        sys.stderr.write(f"jobmedic notify: gave up after {seconds:g} s\n")
        sys.stderr.flush()
        os._exit(code)

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
