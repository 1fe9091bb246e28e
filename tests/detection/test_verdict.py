"""Root-cause rules of the verdict, one test each, on small hand-written logs."""

from __future__ import annotations

from activities.detection.verdict import attribute, normalise_error_text, parse_context
from workflows.contracts import (
    Category,
    EvidenceLine,
    FaultDomain,
    JobEvidence,
    JobInfo,
    JobState,
    NodeInfo,
    TaskLayout,
)

HOSTS = ["gpu01", "gpu02", "gpu03", "gpu04"]


def job(**kw) -> JobInfo:
    base = {"job_id": "42", "nodes": HOSTS, "layout": TaskLayout(nodes=HOSTS, tasks_per_node=[2, 2, 2, 2])}
    base.update(kw)
    return JobInfo(**base)


def watchdog(rank: int, seq: int = 500, *, label: bool = True) -> str:
    prefix = f"{rank}: " if label else ""
    return (f"{prefix}[rank{rank}]:[E1102 10:00:0{rank % 10}.1 9 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, "
            f"Timeout(ms)=600000) ran for 600100 milliseconds before timing out.")


def verdict(lines, **kw):
    return attribute(JobEvidence(log_lines=lines, **kw))


def test_healthy_log_is_none():
    v = verdict([
        "0:  iteration      100/  1000 | lm loss: 2.1E+00 | elapsed time per iteration (ms): 900.1",
        "1: gpu01:11:22 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0",
        "0: [W ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL.",
        "0: Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0",
        "0: /x/torch/cuda/__init__.py:118: UserWarning: CUDA initialization: CUDA driver initialization failed, you might not have a CUDA gpu.",
    ], job=job(state=JobState.COMPLETED, exit_code=0))
    assert v.category == Category.NONE
    assert v.implicated.hosts == []
    assert "1 line(s) looked like errors" in v.explanation


def test_xid79_on_one_host_explains_timeouts_everywhere():
    lines = [watchdog(r) for r in (0, 1, 2, 3, 6, 7)]
    lines.insert(2, "Nov  2 10:00:00 gpu03 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.")
    v = verdict(lines, job=job(state=JobState.FAILED, exit_code=1))
    assert v.category == Category.GPU_HARDWARE
    assert v.fault_domain == FaultDomain.HARDWARE
    assert v.implicated.hosts == ["gpu03"]
    assert v.implicated.gpus == ["gpu03:0000:3b:00"]
    assert any(e.pattern_id == "nvrm_xid" for e in v.evidence)
    assert "Xid 79" in v.explanation and v.confidence >= 0.85


def test_sympathetic_xids_alone_do_not_condemn_a_node():
    v = verdict([
        "Nov  2 10:00:00 gpu02 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python, Graphics SM Warp Exception",
        "Nov  2 10:00:00 gpu02 kernel: NVRM: Xid (PCI:0000:3b:00): 43, pid=1, name=python, Ch 00000010",
        "Nov  2 10:00:00 gpu02 kernel: NVRM: Xid (PCI:0000:3b:00): 45, pid=1, name=python, Ch 00000010",
        "2: Traceback (most recent call last):",
        "2: RuntimeError: CUDA error: an illegal memory access was encountered",
    ], job=job(state=JobState.FAILED, exit_code=1))
    assert v.category == Category.CUDA_ERROR
    assert v.fault_domain == FaultDomain.APPLICATION
    assert v.implicated.hosts == []


def test_cuda_oom_through_nccl_warn_is_gpu_oom():
    v = verdict([
        "5: gpu03:77:88 [1] NCCL WARN Cuda failure 'out of memory'",
        "5: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, unhandled cuda error, NCCL version 2.19.3",
        watchdog(0), watchdog(1),
    ])
    assert v.category == Category.GPU_OOM
    assert v.fault_domain == FaultDomain.RESOURCE


def test_duplicate_gpu_is_a_launch_misconfiguration():
    v = verdict([
        "1: gpu01:5:6 [0] NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000",
        "1: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, invalid usage, NCCL version 2.19.3",
    ])
    assert v.category == Category.APP_ERROR
    assert v.fault_domain == FaultDomain.APPLICATION


def test_preempted_words_with_a_node_failure_reason_is_node_failure():
    v = verdict(["0: received SIGTERM, the job was preempted; saving checkpoint"],
                job=job(state=JobState.NODE_FAIL, reason="NodeFail"),
                nodes=[NodeInfo(name="gpu04", state="DOWN", reason="Not responding")])
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["gpu04"]


def test_node_died_words_with_a_preemption_reason_is_preempted():
    v = verdict(["0: [E] torchelastic: node gpu04 died, rendezvous closed", "0: torch.distributed.elastic.rendezvous.api.RendezvousClosedError"],
                job=job(state=JobState.PREEMPTED, reason="Preempted"))
    assert v.category == Category.PREEMPTED
    assert v.fault_domain == FaultDomain.SCHEDULER


def test_timeout_reporters_are_victims_and_the_silent_rank_is_the_suspect():
    lines = [watchdog(r) for r in range(8) if r != 5]
    v = verdict(lines, job=job())
    assert v.category == Category.NCCL_TIMEOUT
    assert v.implicated.ranks == [5]
    assert v.implicated.hosts == ["gpu03"]  # ranks 4-5 run on gpu03


def test_a_rank_behind_on_sequence_numbers_is_the_suspect():
    lines = [watchdog(r, seq=900 if r != 6 else 899) for r in range(8)]
    v = verdict(lines, job=job())
    assert v.category == Category.NCCL_TIMEOUT
    assert v.implicated.ranks == [6]
    assert v.implicated.hosts == ["gpu04"]


def test_everyone_timing_out_alike_implicates_nobody():
    v = verdict([watchdog(r) for r in range(8)], job=job())
    assert v.category == Category.NCCL_TIMEOUT
    assert v.implicated.hosts == [] and v.implicated.ranks == []


def test_torchrun_ranks_map_through_one_task_per_node():
    layout = TaskLayout(nodes=HOSTS, tasks_per_node=[1, 1, 1, 1])  # torchrun starts 8 ranks per node
    lines = [watchdog(r, label=False) for r in range(32) if r != 19]
    v = verdict(lines, job=job(layout=layout))
    assert v.implicated.ranks == [19]
    assert v.implicated.hosts == ["gpu03"]


def test_node_failing_other_jobs_raises_confidence():
    lines = ["Nov  2 10:00:00 gpu02 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=python, DBE"]
    plain = verdict(lines, job=job())
    repeat = verdict(lines, job=job(), node_failure_counts={"gpu02": 3})
    assert repeat.confidence > plain.confidence
    assert "other jobs" in repeat.explanation


def test_hang_suspected_without_a_cause_is_a_hang_with_stragglers_implicated():
    v = verdict(["0:  iteration 10/100 | lm loss: 2.0"], job=job(state=JobState.RUNNING), hang_suspected=True,
                straggler_hosts=["gpu02"])
    assert v.category == Category.HANG
    assert v.implicated.hosts == ["gpu02"]


def test_hang_suspected_with_a_root_cause_reports_the_cause():
    v = verdict(["3: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB."], job=job(state=JobState.RUNNING),
                hang_suspected=True)
    assert v.category == Category.GPU_OOM


def test_time_limit_noise_after_the_cancel_line_is_fallout():
    v = verdict([
        "0:  iteration 10/100 | lm loss: 2.0",
        "slurmstepd: error: *** JOB 42 ON gpu01 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***",
        "0: Traceback (most recent call last):",
        "0: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error, NCCL version 2.19.3",
    ])
    assert v.category == Category.TIME_LIMIT
    assert v.fault_domain == FaultDomain.SCHEDULER


def test_exit_code_93_is_the_applications_do_not_restart():
    v = verdict(["srun: error: gpu02: task 3: Exited with exit code 93"])
    assert v.category == Category.APP_ERROR
    v2 = verdict([], job=job(state=JobState.FAILED, exit_code=93))
    assert v2.category == Category.APP_ERROR


def test_last_exception_of_a_chain_decides_and_is_signed():
    lines = [
        "2: Traceback (most recent call last):",
        "2: ValueError: shard 17 is empty",
        "2: During handling of the above exception, another exception occurred:",
        "2: Traceback (most recent call last):",
        "2: RuntimeError: could not build index for split train",
        watchdog(0),
    ]
    v = verdict(lines, job=job())
    assert v.category == Category.APP_ERROR
    other_attempt = [ln.replace("17", "4").replace("rank0", "rank1") for ln in lines]
    v2 = verdict(other_attempt, job=job(nodes=["cn9"], layout=TaskLayout(nodes=["cn9"], tasks_per_node=[8])))
    assert v.deterministic_signature and v.deterministic_signature == v2.deterministic_signature
    different = verdict(["0: Traceback (most recent call last):", "0: KeyError: 'labels'"])
    assert different.deterministic_signature != v.deterministic_signature


def test_specific_error_after_a_generic_exception_wins():
    v = verdict([
        "3: Traceback (most recent call last):",
        "3: RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 2176709568 vs 2176709456",
        "3: OSError: [Errno 28] No space left on device: '/scratch/ckpt/iter_0001000/model.pt'",
    ])
    assert v.category == Category.DATA_IO
    assert v.fault_domain == FaultDomain.RESOURCE


def test_drain_reason_and_metric_facts_name_gpu_hardware():
    v = verdict([watchdog(0)], job=job(state=JobState.FAILED, exit_code=1),
                nodes=[NodeInfo(name="gpu02", state="MIXED", flags=["DRAIN"], reason="xid 79")])
    assert v.category == Category.GPU_HARDWARE and v.implicated.hosts == ["gpu02"]
    m = verdict([watchdog(0)], job=job(state=JobState.FAILED, exit_code=1), metric_facts=[
        EvidenceLine(source="metrics", host="gpu04", pattern_id="metrics.ecc_dbe",
                     line="gpu04 GPU 3 (00000000:3B:00.0): 2 double-bit (uncorrectable) ECC error(s) in the window")])
    assert m.category == Category.GPU_HARDWARE
    assert m.implicated.hosts == ["gpu04"] and m.implicated.gpus == ["gpu04:00000000:3b:00.0"]


def test_drains_set_by_jobmedic_itself_are_not_new_evidence():
    v = verdict([], job=job(state=JobState.RUNNING),
                nodes=[NodeInfo(name="gpu02", state="IDLE", flags=["DRAIN"], reason="jobmedic: xid 79 in job 41")])
    assert v.category == Category.NONE


def test_line_prefixes_name_hosts_and_ranks():
    known = frozenset(HOSTS)
    ctx = parse_context("3: gpu02:1234:5678 [1] NCCL WARN NET/IB : Got completion", known_hosts=known)
    assert (ctx.task, ctx.host, ctx.local_gpu) == (3, "gpu02", "1")
    ctx = parse_context("[1,12]<stderr>:[rank12]:[E1102 ProcessGroupNCCL.cpp:1] [Rank 12] boom")
    assert ctx.rank == 12
    ctx = parse_context("gpu04: [12345.678] NVRM: Xid (PCI:0000:3b:00): 79", known_hosts=known)
    assert ctx.host == "gpu04" and ctx.text.startswith("NVRM")
    ctx = parse_context("2024-05-01T10:00:00.123+00:00 cn17 kernel: Out of memory: Killed process 1 (python)")
    assert ctx.host == "cn17"
    assert parse_context("[default3]:[rank11]:boom").local_rank == 3
    assert parse_context("(RayTrainWorker pid=4411, ip=10.2.0.17) boom").host == "10.2.0.17"
    assert parse_context("[pod/llama-worker-3/pytorch] boom").host == "llama-worker-3"
    assert parse_context("worker-7   | boom").host == "worker-7"
    ctx = parse_context("gpu-c21 [Mon Dec  2 11:00:00 2024] NVRM: Xid (PCI:0000:bb:00): 62, pid=1")
    assert ctx.host == "gpu-c21" and ctx.text.startswith("NVRM")
    assert parse_context("RuntimeError: boom").host is None
    assert parse_context("Epoch3: loss 1.0").host is None


def test_normalised_text_drops_hosts_numbers_and_addresses():
    a = normalise_error_text("RuntimeError: bad value 17 at 0x7f00aa on gpu03 from 10.0.0.7<4411>", hosts=["gpu03"])
    b = normalise_error_text("RuntimeError: bad value 99 at 0x1234 on cn0042 from 10.9.9.9<1>", hosts=["cn0042"])
    assert a == b


def test_stragglers_alone_are_not_a_failure():
    v = verdict(["0:  iteration 10/100 | lm loss: 2.0"], job=job(state=JobState.RUNNING), straggler_hosts=["gpu03"])
    assert v.category == Category.NONE
    assert v.implicated.hosts == ["gpu03"] and "straggler" in v.explanation


def test_hostile_lines_do_not_break_attribution():
    lines = [
        "\x00\x00garbage\x00 RuntimeError: CUDA error: an illegal memory access was encountered",
        "\x1b[31mERROR\x1b[0m " + "x" * 200_000,
        "progress\r" * 5000 + "step 10 loss 1.0",
        "\udcff\udcfe invalid utf-8 surrogate",
        "0: " + "[Rank 1] " * 5000,
    ]
    v = verdict(lines, job=job())
    assert v.category == Category.CUDA_ERROR
    assert v.deterministic_signature is not None


def test_a_cleanly_finished_job_is_not_blamed_on_a_node_that_failed_later():
    v = verdict(["0:  iteration 100/100 | lm loss: 1.9"], job=job(state=JobState.COMPLETED, exit_code=0),
                nodes=[NodeInfo(name="gpu02", state="DOWN", reason="Not responding")])
    assert v.category == Category.NONE


def test_watchdog_timeouts_outrank_a_stuck_watchdog():
    stuck = ("0: [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in "
             "monitoring enqueued collectives.")
    assert verdict([stuck]).category == Category.HANG
    assert verdict([stuck, watchdog(1), watchdog(2)]).category == Category.NCCL_TIMEOUT


def test_launch_and_naming_failures():
    assert verdict(["Traceback (most recent call last):",
                    "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:"]).category == Category.APP_ERROR
    assert verdict(["/var/spool/slurmd/job1/slurm_script: line 5: torchrun: command not found"]).category == Category.APP_ERROR
    assert verdict(["RuntimeError: CUDA error: invalid device ordinal"]).category == Category.APP_ERROR
    assert verdict(["socket.gaierror: [Errno -2] Name or service not known"]).category == Category.INTERCONNECT
    assert verdict(["main.Config: loaded 12 keys"]).category == Category.NONE  # no traceback, job not failed
