"""Helpers for the end-to-end tests: a real `jobmedic worker` process, real sbatch jobs, the real audit store.

Each test gets its own cluster name (so its own task queues and watch
workflow) and its own opt-in environment (so its worker watches only the jobs
the test submitted).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from adapters.audit.store import AuditStore
from workflows.contracts import AuditEntry, EventType

REPO = Path(__file__).resolve().parents[2]
JOBMEDIC = str(Path(sys.executable).parent / "jobmedic")
T = TypeVar("T")


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@dataclass
class Scenario:
    """One test's jobmedic deployment: config file, cluster name, environment, audit store."""

    tmp: Path
    cluster: str
    environment: str
    audit_url: str
    temporal_address: str
    mode: str = "action"
    poll_interval_s: float = 1.0
    policy: dict = field(default_factory=dict)
    watchdog: dict = field(default_factory=dict)
    hang: dict = field(default_factory=dict)
    attribution_url: str | None = None
    fault_delays: dict = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)  # cancelled when the test ends

    @property
    def config_path(self) -> Path:
        return self.tmp / f"{self.cluster}.toml"

    def write_config(self) -> Path:
        lines = [
            f'data_dir = "{self.tmp / "data"}"',
            'log_level = "DEBUG"',
            "",
            "[temporal]",
            f'address = "{self.temporal_address}"',
            f'task_queue = "jobmedic-{self.cluster}"',
            "",
            "[audit]",
            f'url = "{self.audit_url}"',
            "",
            "[fault_delays]",
            *[f'{k} = {v}' for k, v in self.fault_delays.items()],
            "",
            "[[clusters]]",
            f'name = "{self.cluster}"',
            f'environment = "{self.environment}"',
            f'environment_pattern = "{self.environment}"',
            f'job_environments = "{self.environment}"',
            f'mode = "{self.mode}"',
            f"acknowledge_scheduler_actions = {'true' if self.mode == 'action' else 'false'}",
            f"poll_interval_s = {self.poll_interval_s}",
        ]
        for section, values in (("policy", self.policy), ("watchdog", self.watchdog), ("hang", self.hang)):
            if values:
                lines.append(f"[clusters.{section}]")
                lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
        if self.attribution_url:
            lines += ["[clusters.attribution]", f'url = "{self.attribution_url}"', "timeout_s = 60"]
        self.config_path.write_text("\n".join(lines) + "\n")
        return self.config_path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBMEDIC_")}
        env["JOBMEDIC_CONFIG"] = str(self.config_path)
        return env

    def cli(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [JOBMEDIC, *args], env=self.env(), capture_output=True, text=True, timeout=timeout, check=check
        )

    def store(self) -> AuditStore:
        return AuditStore(self.audit_url)

    def entries(self, job_id: str) -> list[AuditEntry]:
        store = self.store()
        try:
            return store.query(cluster=self.cluster, job_id=job_id)
        finally:
            store.close()

    def kinds(self, job_id: str) -> list[EventType]:
        return [e.event_type for e in self.entries(job_id)]


class WorkerProcess:
    """`jobmedic worker` as a real child process that a test can kill -9."""

    def __init__(self, scenario: Scenario, *, name: str = "worker") -> None:
        self.scenario = scenario
        self.log = scenario.tmp / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, *, fault_delays: dict | None = None) -> WorkerProcess:
        if fault_delays is not None:
            self.scenario.fault_delays = fault_delays
        self.scenario.write_config()
        with open(self.log, "ab") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [JOBMEDIC, "worker"], env=self.scenario.env(), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return "(no worker log)"


def submit_training(
    workdir: Path,
    *,
    environment: str,
    mode: str = "action",
    plan: str = "xid,ok",
    nodes: int = 2,
    tasks_per_node: int = 2,
    requeue: bool = True,
    iterations: int = 60,
    iteration_seconds: float = 0.1,
    fail_at: int = 25,
    name: str = "jm-e2e",
    comment: str | None = None,
    extra: list[str] | None = None,
) -> str:
    """sbatch the demo training script with a plan per attempt; returns the job id."""
    workdir.mkdir(parents=True, exist_ok=True)
    ckpt = workdir / "ckpt"
    script = workdir / "train.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        f"exec {sys.executable} -u -m workers.demo_train --checkpoint-dir {ckpt} --plan {plan} "
        f"--iterations {iterations} --iteration-seconds {iteration_seconds} --fail-at {fail_at}\n"
    )
    if comment is None:
        comment = json.dumps({"jobmedic": {"environment": environment, "mode": mode, "checkpoint_dir": str(ckpt)}})
    argv = [
        "sbatch", "--parsable", f"--job-name={name}", f"--nodes={nodes}", f"--ntasks-per-node={tasks_per_node}",
        "--requeue" if requeue else "--no-requeue", "--open-mode=append", f"--chdir={REPO}",
        f"--output={workdir}/train-%j.out", f"--comment={comment}", *(extra or []), str(script),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def scontrol_job(job_id: str) -> dict[str, str]:
    """`scontrol show job -o` as a dict (values with spaces are rare for the keys tests read)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
    fields: dict[str, str] = {}
    for token in out.stdout.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def slurm_state(job_id: str) -> tuple[str, int]:
    """(JobState, Restarts) as Slurm shows them now."""
    f = scontrol_job(job_id)
    return f.get("JobState", "?"), int(f.get("Restarts", "0") or 0)


def cancel(job_id: str) -> None:
    subprocess.run(["scancel", job_id], capture_output=True, timeout=30)


async def wait_for(check: Callable[[], T | Awaitable[T]], *, timeout: float, what: str, every: float = 0.5) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        last = value
        await asyncio.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
