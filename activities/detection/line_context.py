"""Who wrote a log line: launcher, syslog and timestamp prefixes peeled off, host, task, rank and GPU read.

Pure code. Prefixes come in any order and nest (a syslog header around a pdsh host around an
`srun --label` task id around a torch `[rankN]:` tag); `parse_context` peels up to eight of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE = 16384  # characters of one line any Python regex here ever sees

_SYSLOG = re.compile(
    r"^(?:<[0-9]{1,3}>)?(?:[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{8,15}(?:Z|[+-][0-9:]{4,5})?) "
    r"([A-Za-z0-9][A-Za-z0-9._-]{0,62}) [A-Za-z0-9_./-]{1,40}(?:\[[0-9]{1,8}\])?: "
)
_STAMP = re.compile(
    r"^(?:\[ {0,6}[0-9]{1,8}\.[0-9]{1,9}\] "  # dmesg
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8} [0-9]{4}\] "  # dmesg -T
    r"|\[?[0-9]{4}-[0-9]{2}-[0-9]{2}[ T_][0-9:.,]{5,15}(?:Z|[+-][0-9:]{4,5})?\]?[ :|-]{0,3}"  # ISO-ish
    r"|[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} )"
)
_MPI_TAG = re.compile(r"^\[(?:[0-9]{1,6},)?([0-9]{1,6})\]<(?:stdout|stderr)>: ?")  # mpirun, horovodrun
_TORCH_RANK = re.compile(r"^\[(?:rank|RANK) ?([0-9]{1,6})\]: ?")
_SRUN_LABEL = re.compile(r"^ {0,6}([0-9]{1,6}): ")
_HOST_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9._-]{0,62}): ")
_TEE_PREFIX = re.compile(r"^\[(?:default|[a-z_]{1,20})([0-9]{1,4})\]:")  # torchrun --tee: [default3]:
_RAY_PREFIX = re.compile(r"^\((?:[A-Za-z_]{0,40} ?pid=[0-9]{1,8}|raylet|gcs_server|autoscaler), ip=([0-9A-Fa-f.:]{3,45})\) ?")
_KUBECTL_PREFIX = re.compile(r"^\[pod/([A-Za-z0-9._-]{1,253})/[A-Za-z0-9._-]{1,63}\] ")
# an epilog or pdsh dump without the colon: "gpu-c21 [Mon Dec  2 11:00:00 2024] NVRM: ..."
_HOST_DMESG_PREFIX = re.compile(
    r"^([A-Za-z][A-Za-z0-9._-]{0,62}) (?=\[(?: {0,6}[0-9]{1,8}\.[0-9]{1,9}|[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8} [0-9]{4})\] )"
)
# UCX's log prefix, "[HOST:PID:THREAD]" (ucs_log) or "[HOST:PID:THREAD:TID]" (its fatal-error handler): the writer
_UCX_PREFIX = re.compile(r"^\[([A-Za-z][A-Za-z0-9._-]{0,62}):([0-9]{1,8}):[0-9]{1,6}(?::[0-9]{1,8})?\] {1,4}")
_COMPOSE_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9._-]{0,62}) +\| ")
_NCCL_PREFIX = re.compile(
    # newer NCCL puts the source location between the device and "NCCL": "[5] transport/net_ib.cc:1696 NCCL WARN"
    r"(?:^|[\s\]:>])([A-Za-z0-9][A-Za-z0-9._-]{0,62}):([0-9]{1,8}):[0-9]{1,8} \[([0-9]{1,3})\] "
    r"(?:[A-Za-z0-9_./-]{1,80}:[0-9]{1,6} )?NCCL "
)
_RANK_BRACKET = re.compile(r"\[(?:PG [^\]]{0,80}?)?Rank ([0-9]{1,6})\]")
_NOT_HOSTS = re.compile(
    r"(?i)^(?:epoch|step|iter|iteration|rank|batch|layer|cuda|device|dev|loss|lr|worker|task|line|"
    r"stage|phase|part|block|thread|proc|process|pid|error|warning|info|debug|note|node|srun|slurmstepd)[0-9_]*$"
)


@dataclass
class LineContext:
    """Who wrote a log line, as far as its prefixes tell."""

    host: str | None = None
    task: int | None = None  # Slurm task id (srun --label)
    rank: int | None = None  # torch global rank
    local_gpu: str | None = None  # NCCL "[dev]"
    pid: int | None = None  # NCCL "host:pid:tid"
    local_rank: int | None = None  # torchrun --tee "[default3]:"
    text: str = ""  # the line without its prefixes


def _host_like(token: str, known: frozenset[str]) -> bool:
    if known:
        return token in known or token.split(".", 1)[0] in known
    if _NOT_HOSTS.match(token) or token.endswith(("Error", "Warning", "Exception")):
        return False
    return any(c.isdigit() for c in token) and not token.isdigit()


def parse_context(line: str, *, known_hosts: frozenset[str] = frozenset()) -> LineContext:
    """Peel launcher, syslog and timestamp prefixes off `line`; read host, task, rank and GPU."""
    ctx = LineContext()
    text = line[:MAX_LINE]
    for _ in range(8):
        m = _SYSLOG.match(text)
        if m:
            ctx.host = ctx.host or m.group(1)
            text = text[m.end():]
            continue
        m = _STAMP.match(text)
        if m and m.end() > 0:
            text = text[m.end():]
            continue
        m = _MPI_TAG.match(text)
        if m:
            ctx.rank = int(m.group(1)) if ctx.rank is None else ctx.rank
            text = text[m.end():]
            continue
        m = _TORCH_RANK.match(text)
        if m:
            ctx.rank = int(m.group(1)) if ctx.rank is None else ctx.rank
            text = text[m.end():]
            continue
        m = _SRUN_LABEL.match(text)
        if m:
            ctx.task = int(m.group(1)) if ctx.task is None else ctx.task
            text = text[m.end():]
            continue
        m = _HOST_PREFIX.match(text) or _COMPOSE_PREFIX.match(text) or _HOST_DMESG_PREFIX.match(text)
        if m and _host_like(m.group(1), known_hosts):
            ctx.host = ctx.host or m.group(1)
            text = text[m.end():]
            continue
        m = _TEE_PREFIX.match(text)
        if m:
            ctx.local_rank = int(m.group(1)) if ctx.local_rank is None else ctx.local_rank
            text = text[m.end():]
            continue
        m = _UCX_PREFIX.match(text)
        if m:
            ctx.host = ctx.host or m.group(1)
            ctx.pid = int(m.group(2)) if ctx.pid is None else ctx.pid
            text = text[m.end():]
            continue
        m = _RAY_PREFIX.match(text) or _KUBECTL_PREFIX.match(text)
        if m:
            ctx.host = ctx.host or m.group(1)
            text = text[m.end():]
            continue
        break
    m = _NCCL_PREFIX.search(text)
    if m:
        ctx.host = ctx.host or m.group(1)
        ctx.pid = int(m.group(2))
        ctx.local_gpu = m.group(3)
    m = _RANK_BRACKET.search(text)
    if m and ctx.rank is None:
        ctx.rank = int(m.group(1))
    ctx.text = text
    return ctx

