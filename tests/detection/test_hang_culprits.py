"""Round 2 forms from real-format tune excerpts (tests/corpus/real/tune/): who a hang waits for, and more."""

from __future__ import annotations


from activities.detection.verdict import attribute
from workflows.contracts import Category, JobEvidence, JobInfo, JobState, TaskLayout

from tests.detection.real_cases import CATALOGUE, verdict_of



def running(lines: list[str], nodes: list[str], per_node: int) -> JobEvidence:
    job = JobInfo(job_id="1", state=JobState.RUNNING, nodes=nodes,
                  layout=TaskLayout(nodes=nodes, tasks_per_node=[per_node] * len(nodes)))
    return JobEvidence(job=job, log_lines=lines)


# ----------------------------------------------------------------------------- Horovod's stall inspector


def test_horovod_missing_ranks_entries_name_the_stuck_rank():
    """stall_inspector.cc: 'Stalled ranks:' (or 'Missing ranks:') then one 'R: [tensors ...]' line per rank that
    has not submitted; the rank, not the mpirun tag of the process that printed it, is the culprit."""
    v = verdict_of("hang-horovod-stall-inspector-rank4-wrapped-q9h01")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [4] and v.implicated.hosts == ["bert-n1"]


def test_horovod_old_missing_ranks_brackets():
    """Older operations.cc: 'Stalled ops:' then 'tensor [missing ranks: 5]'."""
    v = verdict_of("hang-horovod-stall-aprun-rank-asymmetry-q9h09")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [5] and v.implicated.hosts == ["nid00417"]


def test_horovod_ready_ranks_the_stuck_one_is_the_complement():
    """'[ready ranks: 4, 9, 0, ...]' lists the ranks that did submit; with 16 tasks the one not listed is stuck."""
    v = verdict_of("hang-horovod-stalled-ops-missing-rank11-i3h13")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [11] and v.implicated.hosts == ["hvd-03"]


def test_horovod_ready_ranks_that_leave_many_out_single_no_one():
    warn = ("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
            "are waiting for remainder of ranks for more than 60 seconds. Stalled ops: allreduce.x [ready ranks: 0, 1]")
    v = attribute(running([warn], ["n1", "n2"], 4), catalogue=CATALOGUE)
    assert v.category == Category.HANG
    assert v.implicated.ranks == [] and v.implicated.hosts == []  # 6 of 8 missing: no culprit


def test_a_numbered_list_without_a_stall_report_is_no_horovod_entry():
    v = attribute(running(["3: [allreduce] 0.41 ms", "step 10 loss 0.3"], ["n1"], 8), catalogue=CATALOGUE)
    assert v.category == Category.NONE


# ----------------------------------------------------------------------------- stack dumps under headers people write


def test_pyspy_dumps_under_task_banners_name_the_one_not_in_the_collective():
    """'== task 2 pid 18770 on olmo-g2 ==' then py-spy's own 'Process PID:' and decimal 'Thread PID (idle)':
    three dumps wait in all_reduce, task 2's is in its DataLoader - it is the stuck one."""
    v = verdict_of("hang-pyspy-all-ranks-one-in-dataloader-q9h06")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [2] and v.implicated.hosts == ["olmo-g2"]


def test_a_local_rank_header_on_one_node_is_the_global_rank():
    """'== local_rank 5 (pid 207714) ==': on a one-node job the local rank is the global rank."""
    v = verdict_of("hang-pyspy-zero3-allgather-rank5-data-i3h04")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [5] and v.implicated.hosts == ["p5-node-2"]


def test_ray_stack_dumps_take_their_host_from_the_header_address():
    """'$ ray stack   # on 10.9.1.4' then 'Stack dump for USER PID ...' with tab-indented frames: the worker
    whose stack is not in all_reduce is on the address the header names (mapped to its node)."""
    v = verdict_of("hang-ray-stack-worker-waiting-data-i3h18")
    assert v.category == Category.HANG
    assert v.implicated.hosts == ["ray-w-4"]


def test_local_rank_headers_on_several_nodes_use_the_layout_blocks():
    lines = [
        "$ py-spy dump --pid 100   # n1 local_rank 1",
        "Thread 100 (idle): \"MainThread\"",
        "    all_reduce (torch/distributed/distributed_c10d.py:2288)",
        "$ py-spy dump --pid 200   # n2 local_rank 3",
        "Thread 200 (idle): \"MainThread\"",
        "    all_reduce (torch/distributed/distributed_c10d.py:2288)",
        "$ py-spy dump --pid 300   # n2 local_rank 2",
        "Process 300: python train.py",
        "Thread 300 (active): \"MainThread\"",
        "    _read (myproj/data.py:41)",
    ]
    v = attribute(running(lines, ["n1", "n2"], 4), catalogue=CATALOGUE)
    assert v.category == Category.HANG
    assert v.implicated.ranks == [6] and v.implicated.hosts == ["n2"]  # n2's block starts at 4


def test_dumps_all_in_the_collective_single_no_one():
    lines = [
        "== rank 0 pid 10 ==", "    all_reduce (torch/distributed/distributed_c10d.py:2288)",
        "== rank 1 pid 11 ==", "    all_reduce (torch/distributed/distributed_c10d.py:2288)",
    ]
    v = attribute(running(lines, ["n1"], 2), catalogue=CATALOGUE)
    assert v.category == Category.HANG
    assert v.implicated.ranks == []


# ----------------------------------------------------------------------------- a running job's output standing still


def test_nvidia_smi_all_gpus_idle_with_memory_held_is_a_hang():
    """'nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv': all 8 at 0 % holding ~70 GiB on
    a RUNNING job whose bar stopped - blocked ranks, no one singled out."""
    v = verdict_of("hang-colossalai-opensora-progress-frozen-zero-util-b6f04")
    assert v.category == Category.HANG
    assert v.implicated.hosts == [] and v.implicated.ranks == []


def test_one_gpu_idle_while_the_rest_spin_is_the_one_they_wait_for():
    """'$ ssh gpua11 nvidia-smi --query-gpu=power.draw,utilization.gpu,...': GPU 0 at 0 %, seven at 100 %; with
    8 tasks per node (one per GPU) GPU 0 on the first node is rank 0."""
    v = verdict_of("hang-dstate-rank0-nvsmi-idle-i3h02")
    assert v.category == Category.HANG
    assert v.implicated.hosts == ["gpua11"] and v.implicated.ranks == [0]


def test_a_progress_bar_redrawn_at_the_same_step_is_a_hang():
    """tqdm 'Train: 0%| 1/1250 [01:48<37:32:51, 108.22s/it]' then '1/1250 [21:06<...]': 19 min at one step."""
    v = verdict_of("hang-ms-swift-grpo-multinode-after-step1-b6f05")
    assert v.category == Category.HANG


def test_snapshot_and_bar_rules_leave_healthy_output_alone():
    from activities.detection.stall import bar_stall, gpu_snapshot, gpu_stall

    csv = ["index, utilization.gpu [%], memory.used [MiB]", "0, 0 %, 0 MiB", "1, 0 %, 0 MiB"]
    assert gpu_stall(gpu_snapshot(list(enumerate(csv)))) is None  # idle before the job loaded anything
    busy = ["index, utilization.gpu [%], memory.used [MiB]", "0, 97 %, 70000 MiB", "1, 40 %, 70000 MiB"]
    assert gpu_stall(gpu_snapshot(list(enumerate(busy)))) is None
    table = [
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |",
        "| N/A   31C    P0            120W /  700W |   71000MiB /  81559MiB |      0%      Default |",
        "|   1  NVIDIA H100 80GB HBM3          On  |   00000000:2A:00.0 Off |                    0 |",
        "| N/A   35C    P0            690W /  700W |   71000MiB /  81559MiB |    100%      Default |",
        "|   2  NVIDIA H100 80GB HBM3          On  |   00000000:3A:00.0 Off |                    0 |",
        "| N/A   35C    P0            690W /  700W |   71000MiB /  81559MiB |    100%      Default |",
        "|   3  NVIDIA H100 80GB HBM3          On  |   00000000:5D:00.0 Off |                    0 |",
        "| N/A   35C    P0            690W /  700W |   71000MiB /  81559MiB |    100%      Default |",
    ]
    stall = gpu_stall(gpu_snapshot(list(enumerate(table))))
    assert stall is not None and stall.idle == (0,)
    moving = ["Train:  10%| 100/1000 [10:00<1:30:00, 6.00s/it]", "Eval: 100%| 50/50 [14:00<00:00]",
              "Train:  10%| 100/1000 [25:00<1:30:00, 6.00s/it]", "Train:  10%| 101/1000 [25:06<1:30:00, 6.00s/it]"]
    assert bar_stall(list(enumerate(moving))) is None
    stuck = ["Train:  10%| 100/1000 [10:00<1:30:00, 6.00s/it]", "Train:  10%| 100/1000 [25:00<1:30:00, 6.00s/it]"]
    assert bar_stall(list(enumerate(stuck))) is not None


# ----------------------------------------------------------------------------- flight recorder: who never entered


def test_the_rank_that_enqueued_less_when_the_dump_signal_came_is_the_suspect():
    """PyTorch 2.3-2.4: '[PG 0 Rank 6] Received a dump signal from this local rank and will start to dump the debug
    info. Last enqueued NCCL work: 911' while rank 0 had enqueued 912: rank 6 never reached the collective."""
    v = verdict_of("hang-fr-dump-rank6-last-enqueued-behind-q9h02")
    assert v.implicated.ranks == [6] and v.implicated.hosts == ["trn-b2"]


def test_torchfrtrace_missing_ranks_names_the_suspect():
    """torchfrtrace: 'Not all ranks joining collective 20411 ...' then 'missing ranks: {13}'."""
    v = verdict_of("hang-fr-trace-missing-rank-13-allreduce-r4h01")
    assert v.implicated.ranks == [13] and v.implicated.hosts == ["h100-r2"]
