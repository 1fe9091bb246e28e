"""The verdict's last layers: what a failed job died of when no catalogue pattern says.

The catalogue knows specific failures. A job can also die of something no
pattern names; then the end of its output still tells a careful reader a lot:

1. An uncaught exception ends the output (a traceback's last line, or an
   exception line with nothing but launcher noise after it) -> `app_error`,
   signed by the exception type.
2. A fatal signal (`Segmentation fault`, `Killed`, `Aborted`, `Bus error`, exit
   codes 128+N, torchelastic's negative exit codes) -> classified by signal,
   with the scheduler's state deciding between a kill for memory and others.
3. Anything else for a job the scheduler (or the log) says failed -> an
   explicit `unknown`, with the exit code and the last lines as evidence.

Pure functions over (line number, text) pairs, oldest first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workflows.contracts import Category, FaultDomain, JobInfo, JobState

TAIL_LINES = 60  # lines at the end of the output the fallbacks read
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]{0,40}\.){0,8}"
    r"(?P<exc>[A-Z][A-Za-z0-9_]{0,80}(?:Error|Exception|Exit|Interrupt|Failure|Fault|Unsupported))"
    r"(?::(?P<msg>.{0,400}))?$"
)
# an exception printed as its repr, as Hydra and loggers do: ConnectionError("Couldn't reach ...")
_REPR = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]{0,40}\.){0,8}(?P<exc>[A-Z][A-Za-z0-9_]{0,80}(?:Error|Exception))\((?P<msg>.{0,400})\)$")
_QUALIFIED = re.compile(r"^(?P<exc>(?:[a-z_][a-z0-9_]{0,40}\.){1,8}[A-Z][A-Za-z0-9_]{1,60}):(?P<msg>.{0,400})$")
_NUMERIC = re.compile(r"^[\s0-9.,eE+\-%:=/()]*$")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s*File \"[^\"]{1,400}\", line [0-9]{1,7}")
# what launchers print after the process that failed: never the cause itself
_TRAILER = re.compile(
    r"(?i)^(?:$|srun: |slurmstepd: |salloc: |sbatch: |wandb: |\[[0-9:. -]{4,30}\]|E[0-9]{4} |W[0-9]{4} |I[0-9]{4} |"
    r"\[?(?:W|E|I)[0-9 ]|.{0,60}elastic|.{0,30}torch\.distributed|.{0,30}launch\.py|.{0,40}run\.py|"
    r"[*=#-]{3,}|primary job|mpirun|-{3,}|prterun|\s*(?:root cause|failures|time|host|rank|exitcode|error_file|traceback)\s*:|"
    r".{0,40}(?:exit(?:ed)? with (?:exit )?code|exit status|return code|returned non-zero)|"
    r"(?:deepspeed|accelerate|torchrun|ray|horovod|submitit)[ :.\[]|sending process|killing|terminat|"
    r"set the environment variable hydra_full_error|"
    r".{0,20}(?:warning|notice|info)[: \]])"
)
_SIGNAL_WORDS = (
    (re.compile(r"Segmentation fault|SIGSEGV|signal 11\b|Fatal Python error: Segmentation"), 11),
    (re.compile(r"Bus error|SIGBUS|signal 7\b"), 7),
    (re.compile(r"Aborted \(core dumped\)|^Aborted$|SIGABRT|signal 6\b|terminate called after throwing"), 6),
    (re.compile(r"Illegal instruction|SIGILL"), 4),
    (re.compile(r"Floating point exception|SIGFPE"), 8),
    (re.compile(r"(?:^|[ :])Killed(?:$|\s)|SIGKILL|signal 9\b|Signal 9 "), 9),
)
_EXIT_CODE = re.compile(r"(?i)(?:exit(?:ed)?(?: with)?(?: exit)? ?(?:code|status)|exitcode|return code)\s*[:=]?\s*(-?[0-9]{1,3})\b")


@dataclass(frozen=True)
class Fallback:
    """One fallback finding: what the end of the output says."""

    category: Category
    fault_domain: FaultDomain
    line_no: int | None
    line: str
    note: str
    signature_text: str  # what two attempts must share to be "the same error"


# exception types whose family is not the application's own code
_FAMILIES: tuple[tuple[tuple[str, ...], Category, FaultDomain], ...] = (
    (("PermissionError", "IsADirectoryError", "NotADirectoryError", "ReadError", "UnpicklingError", "BadZipFile",
      "ReadTimeoutError", "ReadTimeout", "ConnectTimeout", "ConnectTimeoutError", "MaxRetryError", "SSLError",
      "HfHubHTTPError", "LocalEntryNotFoundError", "OfflineModeIsEnabled", "EntryNotFoundError", "ClientError",
      "NoCredentialsError", "EndpointConnectionError", "IncompleteRead", "ChunkedEncodingError",
      "DatasetGenerationError", "LustreError"), Category.DATA_IO, FaultDomain.SYSTEM_SOFTWARE),
    (("MemoryError", "_ArrayMemoryError"), Category.HOST_OOM, FaultDomain.RESOURCE),
    (("OutOfMemoryError", "ResourceExhaustedError"), Category.GPU_OOM, FaultDomain.RESOURCE),
)
# module prefixes of storage and network clients: their ConnectionError is a data fetch failing
_DATA_MODULES = ("requests.", "urllib3.", "huggingface_hub.", "botocore.", "boto3.", "s3fs.", "fsspec.", "aiohttp.",
                 "datasets.", "google.api_core.", "google.cloud.storage", "azure.core.", "tarfile.", "zipfile.", "_pickle.")


# OSErrors that are not storage: a library that will not load, a device, a socket
_NOT_STORAGE = re.compile(r"(?i)\.so\b|shared object|libcuda|libnccl|cannot open shared|address already in use|"
                          r"connection|network|socket|[Ee]rrno (98|99|101|104|110|111|113)\b|device")
# an exception raised because a barrier's other members did not arrive in time: the raiser is a victim of a hang
_BARRIER_WAIT = re.compile(r"monitoredBarrier|[Bb]arrier timed out|Timed out waiting .{0,40}(barrier|for recv)")
_DIST_WORDS = re.compile(r"(?i)store|c10d|rendezvous|nccl|gloo|socket|rank|worker|peer")


def exception_family(qualified: str, message: str = "") -> tuple[Category, FaultDomain] | None:
    """The category an exception type stands for when it is not an application bug, else None."""
    if not qualified:
        return None
    short = qualified.rsplit(".", 1)[-1]
    if short in ("OSError", "IOError") and message and not _NOT_STORAGE.search(message):
        if "Cannot allocate memory" in message:
            return Category.HOST_OOM, FaultDomain.RESOURCE
        return Category.DATA_IO, FaultDomain.SYSTEM_SOFTWARE  # an I/O call failed: disk, file system, short write
    if short == "ConnectionError" and message and not _DIST_WORDS.search(message):
        return Category.DATA_IO, FaultDomain.SYSTEM_SOFTWARE  # a download or a remote store, not the job's peers
    if message and _BARRIER_WAIT.search(message):
        return Category.HANG, FaultDomain.UNKNOWN  # it waited at a barrier for a process that never came
    if short == "OutOfMemoryError" and qualified.startswith("ray."):
        return Category.HOST_OOM, FaultDomain.RESOURCE  # Ray's memory monitor killed a worker: host memory
    for names, category, domain in _FAMILIES:
        if short in names:
            return category, domain
    if qualified.startswith(_DATA_MODULES):
        return Category.DATA_IO, FaultDomain.SYSTEM_SOFTWARE
    return None


def ends_in_exception(tail: Sequence[tuple[int, str]], strip: Callable[[str], str]) -> Fallback | None:
    """The uncaught exception that ends the output, if it does: the last exception line after which
    only launcher noise follows, with a traceback (or a bare `raise`) above it or an Error-named type."""
    lines = [(n, strip(t).strip()) for n, t in tail]
    seen_tb = any(_TRACEBACK.search(t) for _, t in lines)
    trailing = 0
    for n, text in reversed(lines):
        m = _EXCEPTION_LINE.match(text) or _QUALIFIED.match(text) or _REPR.match(text)
        if m:
            exc = m.group("exc")
            msg = (m.group("msg") or "").strip()
            if msg and _NUMERIC.match(msg):
                return None  # "MeanAbsoluteError: 0.36" is a metric someone logged
            if exc in ("KeyboardInterrupt", "SystemExit") and not seen_tb:
                return None
            if not seen_tb and not exc.endswith(("Error", "Exception")):
                return None
            qualified = text.split(":", 1)[0].split("(", 1)[0]
            category, domain = exception_family(qualified, msg) or (Category.APP_ERROR, FaultDomain.APPLICATION)
            return Fallback(
                category, domain, n, text,
                f"the output ends with an uncaught {qualified}" + (f": {msg[:200]}" if msg else ""),
                qualified,
            )
        if _TRAILER.match(text) or not text:
            continue
        trailing += 1
        if trailing > 6:  # real output after it: the exception did not end the job
            return None
    return None


def fatal_signal(tail: Sequence[tuple[int, str]], job: JobInfo | None, strip: Callable[[str], str]) -> Fallback | None:
    """A process killed by a signal: from the words at the end of the output or the scheduler's exit code."""
    found: tuple[int, int | None, str] | None = None
    signum: int | None
    for n, raw in reversed(tail):
        text = strip(raw).strip()
        named = {signum for rx, signum in _SIGNAL_WORDS if rx.search(text)}
        if len(named) > 1:
            continue  # a line naming several signals lists what may have happened (Ray's 'potential root causes')
        for rx, signum in _SIGNAL_WORDS:
            if rx.search(text):
                found = (signum, n, text)
                break
        if found is None:
            m = _EXIT_CODE.search(text)
            if m:
                code = int(m.group(1))
                signum = -code if code < 0 else (code - 128 if 128 < code < 160 else None)
                if signum in (4, 6, 7, 8, 9, 11):
                    found = (signum, n, text)
        if found is not None:
            break
    if found is None and job is not None:
        signum = job.exit_signal or (job.exit_code - 128 if job.exit_code and 128 < job.exit_code < 160 else None)
        if signum in (4, 6, 7, 8, 9, 11):
            found = (signum, None, f"job {job.job_id} ended by signal {signum} (exit code {job.exit_code})")
    if found is None:
        return None
    signum, line_no, text = found
    oom_state = job is not None and job.state == JobState.OUT_OF_MEMORY
    if signum == 9 or signum == 7:
        what = "SIGKILL" if signum == 9 else "SIGBUS"
        why = ("the scheduler reports OUT_OF_MEMORY" if oom_state
               else "a SIGKILL nobody asked for is almost always the kernel's OOM killer" if signum == 9
               else "SIGBUS in training is shared memory (/dev/shm) running out")
        return Fallback(Category.HOST_OOM, FaultDomain.RESOURCE, line_no, text, f"a process died of {what}: {why}",
                        f"signal {signum}")
    name = {4: "SIGILL", 6: "SIGABRT", 8: "SIGFPE", 11: "SIGSEGV"}[signum]
    return Fallback(Category.APP_ERROR, FaultDomain.APPLICATION, line_no, text, f"a process crashed with {name}",
                    f"signal {signum}")


def unknown_failure(tail: Sequence[tuple[int, str]], job: JobInfo | None, strip: Callable[[str], str]) -> Fallback:
    """Nothing explains it: say so, with the exit code and the last line of output."""
    last = next(((n, strip(t).strip()) for n, t in reversed(tail) if strip(t).strip()), (None, ""))
    code = job.exit_code if job is not None else None
    state = job.state.value if job is not None else "failed"
    note = f"the job ended {state}" + (f" with exit code {code}" if code is not None else "") + "; no known failure in its output"
    return Fallback(Category.UNKNOWN, FaultDomain.UNKNOWN, last[0], last[1], note, f"exit {code}|{last[1][-200:]}")
