"""Launcher reports and NCCL's process lines, read from real-format tune excerpts, and the ranks and GPUs
they let the verdict name. Every excerpt here is in tests/corpus/real/tune/."""

from __future__ import annotations

import json

import pytest

from activities.detection.analyze import evidence_for, parse_layout, scan_stream
from activities.detection.launchers import bus_id_pci, launcher_report, nccl_process, task_ids
from activities.detection.signals import SignalBuilder
from activities.detection.verdict import parse_context

from tests.detection.real_cases import BENCH, CATALOGUE, TUNE, verdict_of


def line_of(name: str, needle: str) -> tuple[int, str]:
    """The first line of a tune excerpt containing `needle`, prefixes peeled."""
    for n, line in enumerate((TUNE / f"{name}.log").read_text().splitlines(), start=1):
        if needle in line:
            return n, parse_context(line).text
    raise AssertionError(f"{needle!r} not in {name}")



# ----------------------------------------------------------------------------- the readers


def test_srun_task_lines_say_which_tasks_ended_of_their_own_failure():
    n, text = line_of("data_io-nemo-srun-local-scratch-enospc-one-node-c7d07", "Exited with exit code")
    report = launcher_report(n, text)
    assert report is not None and report.host == "gpu-d04" and report.ids == (8, 12) and report.own_failure
    n, text = line_of("data_io-nemo-srun-local-scratch-enospc-one-node-c7d07", "tasks 0-7: Terminated")
    ended = launcher_report(n, text)
    assert ended is not None and ended.ids == tuple(range(8)) and not ended.own_failure  # srun ending the rest


def test_mpirun_names_the_rank_and_node_that_died_on_a_signal():
    n, text = line_of("interconnect-ucx-retry-exceeded-one-node-mpirun-b6b03", "mpirun noticed")
    report = launcher_report(n, text)
    assert report is not None and (report.launcher, report.host, report.ids) == ("mpirun", "cn-c17", (34,))
    assert report.status == "signal 6" and report.own_failure


def test_deepspeed_launcher_gives_the_local_rank_and_return_code():
    n, text = line_of("gpu_oom-deepspeed-launcher-single-node-cifar-g2c20", "exits with return code")
    report = launcher_report(n, text)
    assert report is not None and report.launcher == "deepspeed" and report.local
    assert report.ids == (0,) and report.status == "exit 1"


def test_nccl_init_line_says_which_rank_and_gpu_a_process_is():
    _, text = line_of("gpu_hardware-uncorrectable-nvlink-nccl-p2p-g2a24", "Init COMPLETE")
    proc = nccl_process(text)
    assert proc is not None and (proc.host, proc.pid, proc.rank, proc.cuda_dev) == ("taurus-i8030", 88217, 2, 2)
    assert proc.pci == "0000:3b:00"
    # NCCL 2.19+: "ncclCommInitRank comm ... nvmlDev N busId B"
    _, text = line_of("nccl_error-sglang-pynccl-init-roce-unhandled-system-b6e02", "ncclCommInitRank comm")
    newer = nccl_process(text)
    assert newer is not None and newer.rank == 6 and newer.pci == "0000:90:00"


@pytest.mark.parametrize(("bus", "pci"), [("3b000", "0000:3b:00"), ("8000", "0000:08:00"), ("1b3000", "0001:b3:00")])
def test_nccl_bus_ids_are_pci_addresses(bus, pci):
    assert bus_id_pci(bus) == pci


def test_task_lists():
    assert task_ids("0-1,3-5,7") == [0, 1, 3, 4, 5, 7]
    assert len(task_ids("0-100000")) == 64


# ----------------------------------------------------------------------------- what the verdict names


@pytest.mark.parametrize(
    ("name", "ranks", "form"),
    [
        ("app_error-jax-tracerarrayconversion-a5a19", [0], "srun: the task that exited non-zero (one task per node)"),
        ("app_error-lightning-checkpoint-monitor-a5a18", [0], "srun: the task that exited non-zero"),
        ("data_io-nemo-srun-local-scratch-enospc-one-node-c7d07", [8, 12], "srun: both tasks on the full node"),
        ("nccl_error-submitit-one-of-16-system-error-midrun-n1b18", [11], "srun: one task of 16"),
        ("node_failure-salloc-node-failure-srun-l-i3n03", [2], "srun: the task killed on the failed node"),
        ("interconnect-ucx-retry-exceeded-one-node-mpirun-b6b03", [34], "mpirun noticed ... exited on signal"),
        ("gpu_oom-deepspeed-launcher-single-node-cifar-g2c20", [0], "DeepSpeed launcher, one node: local = global"),
        ("gpu_hardware-uncorrectable-nvlink-nccl-p2p-g2a24", [2], "the only NCCL process of the log"),
    ],
)
def test_the_first_failed_rank_is_named(name, ranks, form):
    v = verdict_of(name)
    assert set(ranks) <= set(v.implicated.ranks), f"{form}: {v.implicated}"


def test_a_gpu_is_named_by_the_bus_id_nccl_gave_its_process():
    v = verdict_of("gpu_hardware-uncorrectable-nvlink-nccl-p2p-g2a24")
    assert v.implicated.gpus == ["taurus-i8030:0000:3b:00"]


def builder_for(name: str) -> SignalBuilder:
    """The verdict's signal builder after reading an excerpt's log and process lines."""
    side = json.loads((TUNE / f"{name}.expected.json").read_text())
    with (TUNE / f"{name}.log").open("rb") as stream:
        scan = scan_stream(stream, catalogue=CATALOGUE)
    evidence = evidence_for(scan, layout=parse_layout(side["layout"]), job=BENCH.case_job(side))
    b = SignalBuilder(evidence, CATALOGUE)
    lines = sorted(scan.lines.items())
    b.add_log(lines, scan.hits)
    b.add_process_lines([*lines, *scan.tail])
    return b


def test_tasks_are_not_ranks_under_a_per_node_launcher():
    """torchrun under srun (one task per node): srun's 'task 0' is node 0's agent, not rank 0."""
    agent = builder_for("app_error-torchrun-keyerror-a5a01")
    assert not agent.tasks_are_ranks()
    assert agent.first_failed() == ("gpu-c07", [])
    direct = builder_for("cuda_error-driver-insufficient-one-node-g2b15")  # srun runs the processes itself
    assert direct.tasks_are_ranks()
    assert direct.first_failed() == ("gpu-k14", [1])
