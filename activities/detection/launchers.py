"""What launchers print about the process that failed first, and what NCCL prints about who each process is.

Pure code, no I/O. Each reader takes one line (prefixes already peeled) and returns what it says,
or None. The formats, as the tools have printed them for years:

- Slurm `srun` (17.x-24.x), one line per group of tasks when a step ends:
  `srun: error: HOST: task 3: Exited with exit code 1`, `...: tasks 8,12: Killed`,
  `...: tasks 0-7: Terminated`, `...: task 21: Aborted (core dumped)`. `Terminated` is srun ending
  the rest after the first failure; every other status (an exit code, `Killed`, `Aborted`, `Segmentation fault`, `Bus error`,
  `Out Of Memory`) is the task's own end.
- Open MPI / PRRTE (1.x-5.x): `mpirun noticed that process rank 34 with PID 118402 on node cn-c17
  exited on signal 6 (Aborted).` (`prterun noticed ...` in 5.x).
- DeepSpeed's launcher (`deepspeed.launcher.launch`, sigkill_handler):
  `[... launch.py:321:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=3', ...] exits with return code = 1`:
  the worker's *local* rank, and its exit code.
- A shell session pasted into the output (bash's default `user@host:dir$` / `#` prompt, the RHEL/Rocky
  default `[user@host dir]$`, `$ ssh HOST cmd`):
  the lines after a prompt, up to the next one, were printed on that host.
- NCCL INFO (2.4-2.2x), per communicator of each process:
  `HOST:PID:TID [DEV] NCCL INFO comm 0x55d1e3a0 rank 2 nranks 4 cudaDev 2 busId 3b000 - Init COMPLETE`
  (2.18+ adds `nvmlDev N` before `busId`, `ncclCommInitRank comm ...` opens the line in 2.19+):
  which global rank and which GPU (PCI bus id) the process `HOST:PID` is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SRUN_TASKS = re.compile(
    r"srun: error: (?P<host>[A-Za-z0-9._-]{1,63}): tasks? (?P<tasks>[0-9][0-9,-]{0,200}): (?P<status>[A-Za-z][A-Za-z ]{1,40}?"
    r"(?: [0-9]{1,3})?)(?: \(core dumped\))?\s*$"
)
_MPI_NOTICED = re.compile(
    r"(?:mpirun|mpiexec|prterun|orterun) noticed that process rank (?P<rank>[0-9]{1,7}) with PID [0-9]{1,10} "
    r"on node (?P<host>[A-Za-z0-9._-]{1,63}) exited on signal (?P<signal>[0-9]{1,3})"
)
_DEEPSPEED_EXIT = re.compile(
    r"'--local_rank=(?P<local_rank>[0-9]{1,4})'.{0,2000}?\] exits with return code = (?P<code>-?[0-9]{1,4})"
)
_NCCL_OWN_ADDRESS = re.compile(
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,62}):[0-9]{1,8}:[0-9]{1,8} \[[0-9]{1,3}\] NCCL INFO "
    r"(?:Bootstrap ?: Using|NET/[^\n]{0,300}?; OOB) [A-Za-z0-9_.-]{1,32}:(?P<addr>[0-9]{1,3}(?:\.[0-9]{1,3}){3})<")
_NCCL_COMM = re.compile(
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,62}):(?P<pid>[0-9]{1,8}):[0-9]{1,8} \[(?P<dev>[0-9]{1,3})\] NCCL INFO "
    r"(?:ncclCommInit[A-Za-z]{0,12} )?comm 0x[0-9a-fA-F]{1,16} rank (?P<rank>[0-9]{1,7}) nranks (?P<nranks>[0-9]{1,7}) "
    r"cudaDev (?P<cuda_dev>[0-9]{1,3})(?: nvmlDev [0-9]{1,3})? busId (?P<bus>[0-9a-fA-F]{1,8})"
)
# a pasted terminal session: "root@gpu-node07:~# dmesg -T", "user@host:/path$ cmd", "[root@mi300-vm-3 ~]# rdma link"
# (bash's PS1 on RHEL and its rebuilds, what most clusters run), "$ ssh gpua11 nvidia-smi"
_PROMPT = re.compile(r"^(?:[A-Za-z0-9_.-]{1,32}@(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,62}):[^\s#$]{0,200}[#$]"
                     r"|\[[A-Za-z0-9_.-]{1,32}@(?P<rhel>[A-Za-z0-9][A-Za-z0-9._-]{0,62})(?:[ :][^\]\s]{1,200})?\][#$]"
                     r"|[#$] ssh (?:-[A-Za-z]+ [^ ]+ )*(?P<ssh>[A-Za-z0-9][A-Za-z0-9._-]{0,62}) [^ ])")
# a pasted section's banner: the same run of three or more '-', '=' or '#' on both sides of its title
_SECTION = re.compile(r"^\s*(-{3,}|={3,}|#{3,}) [^\n]{1,200} \1\s*$")
MAX_IDS = 64


def prompt_host(line: str) -> str | None:
    """The host a shell prompt line says the commands after it run on (None: not a prompt, or no host)."""
    if "@" not in line and "ssh " not in line:
        return None
    m = _PROMPT.match(line.lstrip())
    if not m:
        return None
    return m.group("host") or m.group("rhel") or m.group("ssh")


def section_header(line: str) -> bool:
    """A banner that opens a pasted section: '--- dmesg -T on gpu-e33 ---', '=== sacct ==='."""
    return _SECTION.match(line) is not None


@dataclass(frozen=True)
class LauncherReport:
    """One launcher line about how processes ended."""

    line_no: int
    launcher: str  # srun | mpirun | deepspeed
    host: str | None
    ids: tuple[int, ...]  # srun task ids, MPI ranks, or DeepSpeed local ranks (see `local`)
    status: str  # srun's status words, "signal N", or "exit N"
    local: bool = False  # ids are ranks within the node

    @property
    def own_failure(self) -> bool:
        """The process ended of its own failure (not the launcher ending it after someone else's)."""
        if self.launcher == "srun":
            return self.status not in ("Terminated", "Exited with exit code 0") and not self.status.startswith("Done")
        return self.status not in ("exit 0", "signal 15")


def launcher_report(line_no: int, text: str) -> LauncherReport | None:
    """The launcher's word on how processes ended, from one line without its prefixes."""
    if "srun: error:" in text:
        m = _SRUN_TASKS.search(text)
        if m:
            return LauncherReport(line_no, "srun", m.group("host"), tuple(task_ids(m.group("tasks"))),
                                  m.group("status").strip())
    if "noticed that process rank" in text:
        m = _MPI_NOTICED.search(text)
        if m:
            return LauncherReport(line_no, "mpirun", m.group("host"), (int(m.group("rank")),),
                                  f"signal {m.group('signal')}")
    if "exits with return code" in text and "--local_rank=" in text:
        m = _DEEPSPEED_EXIT.search(text)
        if m:
            return LauncherReport(line_no, "deepspeed", None, (int(m.group("local_rank")),),
                                  f"exit {int(m.group('code'))}", local=True)
    return None


@dataclass(frozen=True)
class NcclProcess:
    """Who one NCCL process is: its host and pid, global rank, local CUDA device and PCI bus id."""

    host: str
    pid: int
    rank: int
    cuda_dev: int
    pci: str  # dddd:bb:dd, lower case


def nccl_process(text: str) -> NcclProcess | None:
    """The process a NCCL communicator-init INFO line describes."""
    if "NCCL INFO" not in text or " busId " not in text:
        return None
    m = _NCCL_COMM.search(text)
    if not m:
        return None
    return NcclProcess(m.group("host"), int(m.group("pid")), int(m.group("rank")), int(m.group("cuda_dev")),
                       bus_id_pci(m.group("bus")))


def nccl_own_address(text: str) -> tuple[str, str] | None:
    """(the host in NCCL's prefix, the address it says it uses) from its 'Bootstrap : Using bond0:10.40.2.14<0>'
    or 'NET/IB : Using ... ; OOB bond0:10.40.2.14<0>' line: in a container the prefix is the container's id."""
    if "NCCL INFO" not in text:
        return None
    m = _NCCL_OWN_ADDRESS.search(text)
    return (m.group("host"), m.group("addr")) if m else None


def bus_id_pci(bus: str) -> str:
    """NCCL's `busId 3b000` (bus 0x3b, device 0x00, function 0) -> `0000:3b:00`."""
    value = int(bus, 16)
    domain, bus_no, device = value >> 20, (value >> 12) & 0xFF, (value >> 4) & 0xFF
    return f"{domain:04x}:{bus_no:02x}:{device:02x}"


def task_ids(text: str) -> list[int]:
    """`0`, `1-3`, `0,2-3` -> the task ids (at most MAX_IDS)."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        for t in range(int(lo), min(int(hi or lo), int(lo) + MAX_IDS) + 1):
            out.append(t)
            if len(out) >= MAX_IDS:
                return out
    return out
