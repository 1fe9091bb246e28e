"""Mangled corpus lines never crash attribution and always give a well-formed verdict."""

from __future__ import annotations

import random
from pathlib import Path

from activities.detection.verdict import attribute
from workflows.contracts import Category, JobEvidence, JobInfo, JobState, NodeInfo, TaskLayout

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
JUNK = ["\x00", "\udcfe RuntimeError: CUDA error: misaligned address \udcff", "\x1b[1;31m", "\r", "\udcff", "[Rank ", "]", ":", "NVRM: Xid (PCI:", "99999999999999999999", "[rank",
        "SeqNum=", "Timeout(ms)=", "host      : ", "exitcode  : -", "srun: error: ", " task ", "Traceback (most recent call last):"]


def _mangle(rng: random.Random, line: str) -> str:
    ops = rng.randint(0, 4)
    for _ in range(ops):
        pos = rng.randint(0, len(line))
        choice = rng.random()
        if choice < 0.4:
            line = line[:pos] + rng.choice(JUNK) + line[pos:]
        elif choice < 0.7:
            line = line[:pos]
        else:
            line = line[pos:] + line[:pos]
    return line


def test_mangled_logs_give_valid_verdicts():
    rng = random.Random(4242)
    pool = [ln for p in sorted(CORPUS.glob("*/*.log"))[:120] for ln in p.read_text().splitlines()]
    states = list(JobState)
    for _ in range(150):
        lines = [_mangle(rng, rng.choice(pool)) for _ in range(rng.randint(0, 60))]
        nodes = [f"n{i}" for i in range(rng.randint(0, 4))]
        job = JobInfo(job_id="1", state=rng.choice(states), exit_code=rng.choice([None, 0, 1, 93, -9]), nodes=nodes,
                      layout=TaskLayout(nodes=nodes, tasks_per_node=[rng.randint(1, 8) for _ in nodes]))
        evidence = JobEvidence(
            job=rng.choice([None, job]), log_lines=lines, hang_suspected=rng.random() < 0.2,
            nodes=[NodeInfo(name=n, state=rng.choice(["DOWN", "IDLE", "MIXED"]), flags=rng.choice([[], ["DRAIN"]]),
                            reason=rng.choice(["", "xid 79", "Kill task failed"])) for n in nodes],
            straggler_hosts=nodes[:1] if rng.random() < 0.2 else [],
        )
        v = attribute(evidence)
        assert isinstance(v.category, Category)
        assert 0.0 <= v.confidence <= 1.0
        assert v.explanation
        assert v.implicated.hosts == sorted(set(v.implicated.hosts))
        v.model_dump_json().encode("utf-8")  # crosses Temporal as JSON: must serialise
