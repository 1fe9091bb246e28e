"""Writes the second blind split (tests/corpus/blind2/): written last, scored once, never tuned on.

Different again from the other splits: long excerpts where the failure is a
few lines among thousands, two failures in one log (the earlier one is the
cause), multi-node logs with interleaved ranks and no prefixes, syslog excerpts
appended by an epilog script, and benign logs whose warnings use alarming words.

Run: .venv/bin/python tests/corpus/generate_blind2.py
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus_split import Split

OUT = Path(__file__).with_name("blind2")
R = random.Random(90210)
SPLIT = Split(OUT)
case = SPLIT.case


def titan(n: int, step: int = 100) -> list[str]:
    return [f"[titan] 2024-12-0{R.randint(1, 9)} 1{R.randint(0, 9)}:{R.randint(10, 59)}:{R.randint(10, 59)},{R.randint(100, 999)} - root - INFO - step: {step + k:6d}  loss: {R.uniform(2, 4):7.4f}  memory: {R.uniform(50, 70):5.2f}GiB({R.uniform(60, 90):.2f}%)  tps: {R.randint(3000, 4000):,}  tflops: {R.uniform(300, 400):.2f}  mfu: {R.uniform(30, 45):.2f}%"
            for k in range(n)]


def hf(n: int, epoch: float = 0.1) -> list[str]:
    return [f"{{'loss': {R.uniform(0.5, 1.5):.4f}, 'grad_norm': {R.uniform(0.1, 2):.4f}, 'learning_rate': {R.uniform(1e-6, 2e-5):.4e}, 'epoch': {epoch + k * 0.01:.2f}}}" for k in range(n)]


def epilog(host: str, lines: list[str]) -> list[str]:
    return ["==== epilog: dmesg -T tail ====", *[f"{host} {line}" for line in lines], "==== end epilog ===="]


# ------------------------------------------------------------------------------ benign
case("benign_titan_long", [*titan(400), "[titan] 2024-12-01 12:00:00,000 - root - INFO - Training completed"], "none", "unknown")
case("benign_hf_with_scary_words", [
    *hf(30),
    "[WARNING|trainer.py:2913] 2024-12-01 01:01:01,001 >> There were missing keys in the checkpoint model loaded: ['lm_head.weight'].",
    "[INFO|trainer.py:3478] 2024-12-01 01:01:02,002 >> Saving model checkpoint to out/checkpoint-500",
    "[WARNING|modeling_utils.py:4800] 2024-12-01 01:01:03,003 >> `use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`.",
    "The error rate of the tokenizer fallback path was 0.00%",
    *hf(30, 0.4),
    "{'train_runtime': 5011.2, 'train_samples_per_second': 91.3, 'train_steps_per_second': 0.71, 'train_loss': 0.88, 'epoch': 1.0}",
], "none", "unknown")
case("benign_nccl_ras_ok", [
    *[f"gpu-c{n:02d}:{1000 + g}:{2000 + g} [{g}] NCCL INFO RAS client listening socket at ::1<28028>" for n in (1, 2) for g in range(2)],
    "gpu-c01:1000:2000 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 23.",
    "gpu-c01:1000:2000 [0] NCCL INFO NET/IB: [0] mlx5_0:uverbs0:1/IB provider=Mlx5 speed=400000 context=0x55d0 pciPath=/sys/devices/pci0000:9a",
    "gpu-c01:1000:2000 [0] NCCL INFO Retrying ibv_reg_mr after 1 failed attempts",
    *titan(50),
], "none", "unknown")
case("benign_epilog_healthy", [
    *titan(20),
    *epilog("gpu-c07", ["[Mon Dec  2 10:00:00 2024] mlx5_core 0000:0c:00.0: mlx5_pcie_event:301:(pid 1): PCIe slot advertised sufficient power (75W).",
                        "[Mon Dec  2 10:00:01 2024] nvidia-peermem: module loaded"]),
], "none", "unknown", job={"state": "COMPLETED", "exit_code": 0})
case("benign_checkpoint_and_eval", [
    *titan(10),
    "[titan] 2024-12-02 10:00:00,000 - root - INFO - Saving the checkpoint (or staging if async is enabled).",
    "[titan] 2024-12-02 10:00:09,000 - root - INFO - [GC] Performing periodical GC collection. 0.04 seconds.",
    "[titan] 2024-12-02 10:00:10,000 - root - INFO - Finished saving the checkpoint (or staging if async is enabled)in 9.91 seconds.",
    "[titan] 2024-12-02 10:00:11,000 - root - WARNING - Dataset c4 is being re-looped",
    *titan(10, 110),
], "none", "unknown")
case("benign_fsdp_warnings", [
    "/usr/local/lib/python3.11/site-packages/torch/distributed/fsdp/_state_dict_utils.py:773: UserWarning: When using ``NO_SHARD`` for ``ShardingStrategy``, full_state_dict will be returned.",
    "/usr/local/lib/python3.11/site-packages/torch/_dynamo/variables/functions.py:663: UserWarning: Graph break due to unsupported builtin",
    "W1202 10:11:12.000000 140 torch/_dynamo/convert_frame.py:844] [0/8] torch._dynamo hit config.cache_size_limit (8)",
    *hf(20),
], "none", "unknown")

# ------------------------------------------------------------------------------ two failures: the earlier is the cause
lines = [*titan(30)]
lines += ["Traceback (most recent call last):",
          '  File "/app/torchtitan/train.py", line 400, in main',
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.83 GiB. GPU 6 has a total capacity of 79.10 GiB of which 3.21 GiB is free."]
lines += [f"[rank{r}]:[E1202 11:11:11.000000 {r} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=771, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=300000) ran for 300004 milliseconds before timing out." for r in range(1, 8)]
case("two_failures_oom_then_timeouts", lines, "gpu_oom", "resource")

lines = [*titan(10)]
lines += ["gpu-c11:4040:4141 [3] NCCL WARN NET/IB : Got completion from peer 10.44.0.12<41001> with error 12, opcode 0, len 0, vendor err 129 (Send) localGid ::ffff:10.44.0.11",
          "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
          "[rank3]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
          "[rank3]: Last error:",
          "[rank3]: NET/IB : Got completion from peer 10.44.0.12<41001> with error 12, opcode 0, len 0, vendor err 129 (Send) localGid ::ffff:10.44.0.11"]
case("ib_error_then_nccl_system_error", lines, "interconnect", "network", ["gpu-c11"])

# ------------------------------------------------------------------------------ interleaved, no prefixes
lines = []
for k in range(40):
    lines.append(titan(1, 200 + k)[0])
lines += ["[E ProcessGroupNCCL.cpp:1182] [Rank 12] NCCL watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
          "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
          "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 (most recent call first):",
          "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f5 in /usr/lib/libc10.so)",
          "[E ProcessGroupNCCL.cpp:916] [Rank 4] NCCL watchdog thread terminated with exception: [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=90, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600300 milliseconds before timing out."]
case("interleaved_illegal_access_rank12", lines, "cuda_error", "application")

# ------------------------------------------------------------------------------ hardware via epilog
case("epilog_xid_62", [
    *titan(15),
    "[rank0]: RuntimeError: CUDA error: unspecified launch failure",
    *epilog("gpu-c21", ["[Mon Dec  2 11:00:00 2024] NVRM: Xid (PCI:0000:bb:00): 62, pid=7788, name=python, 0000dd12 00000000 0000001d 0000d2c2"]),
], "gpu_hardware", "hardware", ["gpu-c21"])

case("epilog_row_remap_failure_smi", [
    *hf(5),
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "==== epilog: nvidia-smi -q -d ROW_REMAPPER on gpu-c22 ====",
    "gpu-c22:     Remapped Rows",
    "gpu-c22:         Correctable Error                 : 0",
    "gpu-c22:         Uncorrectable Error               : 9",
    "gpu-c22:         Pending                           : No",
    "gpu-c22:         Remapping Failure Occurred        : Yes",
], "gpu_hardware", "hardware", ["gpu-c22"])

case("gpu_lost_nvidia_smi", [
    *titan(5),
    "gpu-c23: Unable to determine the device handle for GPU0000:4F:00.0: GPU is lost.  Reboot the system to recover this GPU",
    "[rank5]: RuntimeError: CUDA error: unknown error",
], "gpu_hardware", "hardware", ["gpu-c23"])

case("metrics_dbe_only", [*titan(12), "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5"],
     "gpu_hardware", "hardware", ["gpu-c24"],
     job={"state": "FAILED", "exit_code": 1, "nodes": ["gpu-c24", "gpu-c25"]},
     metric_facts=[{"source": "metrics", "host": "gpu-c24", "pattern_id": "metrics.ecc_dbe",
                    "line": "gpu-c24 GPU 2 (00000000:5D:00.0): 4 double-bit (uncorrectable) ECC error(s) in the window"}])

# ------------------------------------------------------------------------------ nccl timeout with suspects
lines = [*titan(5)]
for r in range(16):
    if r in (9,):
        continue
    seq = 5120
    lines.append(f"[rank{r}]:[E1202 12:{10 + r % 50}:00.000000 {r} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")
case("nccl_timeout_rank9_missing_two_nodes", lines, "nccl_timeout", "unknown", ["gpu-c32"], layout="gpu-c31,gpu-c32:8")

case("nccl_timeout_monitored_barrier_old", [
    "RuntimeError: Rank 3 failed to pass monitoredBarrier in 30000 ms",
    " Original exception: ",
    "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms for recv operation to complete",
], "nccl_timeout", "unknown", ["gpu-c42"], layout="gpu-c41,gpu-c42:2")  # rank 3 of 2 per node

# ------------------------------------------------------------------------------ nccl error
case("nccl_internal_error_only", [
    *titan(8),
    "[rank2]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2030, internal error - please report this issue to the NCCL developers, NCCL version 2.20.5",
    "[rank2]: ncclInternalError: Internal check failed.",
    "[rank2]: Last error:",
    "[rank2]: Message truncated : received 2048 bytes instead of 1024",
], "nccl_error", "system_software")

# ------------------------------------------------------------------------------ app errors
case("app_error_shape_mismatch_fsdp", [
    *hf(6),
    "[rank0]: Traceback (most recent call last):",
    "[rank0]:   File \"/app/sft.py\", line 77, in <module>",
    "[rank0]: RuntimeError: The size of tensor a (4096) must match the size of tensor b (2048) at non-singleton dimension 1",
    "E1202 13:00:00.000000 100 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 9911) of binary: /usr/bin/python3",
], "app_error", "application")

case("app_error_tokenizer_missing", [
    "OSError: Can't load tokenizer for 'meta-llama/Llama-3.1-8B'. If you were trying to load it from 'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
], "app_error", "application", job={"state": "FAILED", "exit_code": 1})

case("app_error_exit93_srun", [*titan(20), "Stopping: the loss spiked 3 times, the run asks not to be restarted", "srun: error: gpu-c50: tasks 0-7: Exited with exit code 93"],
     "app_error", "application")

# ------------------------------------------------------------------------------ data
case("data_io_enospc_tmp", [
    *titan(10),
    "[rank0]: OSError: [Errno 28] No space left on device: '/tmp/torchinductor_user/triton/0/abc.cubin'",
], "data_io", "resource")

case("data_io_stale_nfs_epilog", [
    *titan(3),
    "[rank6]: OSError: [Errno 116] Stale file handle",
    *epilog("gpu-c55", ["[Mon Dec  2 13:13:13 2024] nfs: server filer01 not responding, still trying"]),
], "data_io", "system_software", ["gpu-c55"], job={"state": "FAILED", "exit_code": 1, "nodes": ["gpu-c55"]})

case("data_io_checkpoint_load_truncated", [
    "Loading checkpoint shards:  50%|█████     | 2/4 [00:03<00:03,  1.6s/it]",
    "Traceback (most recent call last):",
    "  File \"/app/eval.py\", line 12, in <module>",
    "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
], "data_io", "application")

# ------------------------------------------------------------------------------ host memory
case("host_oom_k8s_oomkilled", [
    *hf(5),
    "llama-ft-worker-0: Last State: Terminated  Reason: OOMKilled  Exit Code: 137",
], "host_oom", "resource")
case("host_oom_syslog_epilog", [
    *titan(4),
    *epilog("gpu-c60", ["[Mon Dec  2 14:00:00 2024] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
                        "[Mon Dec  2 14:00:00 2024] Out of memory: Killed process 5151 (python3) total-vm:412341232kB, anon-rss:401231232kB"]),
], "host_oom", "resource")

# ------------------------------------------------------------------------------ scheduler
case("time_limit_titan", [*titan(50), "slurmstepd: error: *** JOB 1010101 ON gpu-c70 CANCELLED AT 2024-12-02T23:59:59 DUE TO TIME LIMIT ***"],
     "time_limit", "scheduler")
case("preempted_titan", [*titan(10), "slurmstepd: error: *** JOB 1010102 ON gpu-c71 CANCELLED AT 2024-12-02T20:00:00 DUE TO PREEMPTION ***",
                         "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5"],
     "preempted", "scheduler")
case("node_failure_srun_titan", [*titan(10), "srun: error: Node failure on gpu-c73", "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
                                 "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5"],
     "node_failure", "node", ["gpu-c73"])

# ------------------------------------------------------------------------------ hangs
case("hang_titan_silent", [*titan(60)], "hang", "unknown", hang_suspected=True, job={"state": "RUNNING"})
case("hang_with_straggler", [*titan(60)], "hang", "unknown", ["gpu-c80"], hang_suspected=True,
     straggler_hosts=["gpu-c80"], job={"state": "RUNNING", "nodes": ["gpu-c79", "gpu-c80"]})


def main() -> None:
    SPLIT.write()


if __name__ == "__main__":
    main()
