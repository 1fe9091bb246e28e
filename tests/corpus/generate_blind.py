"""Writes the *blind* split (tests/corpus/blind/): written after the engine was done, scored once.

The first held-out split (holdout/) revealed three generic bugs that were then
fixed, so it now doubles as a regression split. This one was written without
looking at the engine's output, in yet other styles: torchrun `--tee` prefixes
(`[default3]:`), Ray Train worker prefixes, Kubernetes pod names as hosts,
Accelerate/DeepSpeed launcher lines, long noisy excerpts with several red
herrings, and a few wordings the catalogue was not written against.

Run: .venv/bin/python tests/corpus/generate_blind.py
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus_split import Split

OUT = Path(__file__).with_name("blind")
R = random.Random(31337)
SPLIT = Split(OUT)
case = SPLIT.case


def tee(local: int, text: str) -> str:
    return f"[default{local}]:{text}"


def ray(pid: int, ip: str, text: str) -> str:
    return f"(RayTrainWorker pid={pid}, ip={ip}) {text}"


def accel_progress(n: int) -> list[str]:
    return [f"{R.randint(1, 99)}%|{'#' * R.randint(1, 9):<10}| {k * 37}/40000 [1:0{R.randint(0, 9)}:{R.randint(10, 59)}<9:00:00,  1.{R.randint(10, 99)}s/it, loss={R.uniform(0.5, 2):.3f}, lr={R.uniform(1e-6, 1e-5):.2e}]"
            for k in range(1, n)]


def megatron_core(n: int, start: int = 20000) -> list[str]:
    return [f" [2024-11-0{R.randint(1, 9)} 0{R.randint(0, 9)}:{R.randint(10, 59)}:{R.randint(10, 59)}] iteration    {start + k}/  300000 | consumed samples:    {(start + k) * 1024} | elapsed time per iteration (ms): {R.uniform(3000, 3300):.1f} | throughput per GPU (TFLOP/s/GPU): {R.uniform(380, 420):.1f} | learning rate: 1.500000E-04 | global batch size:  1024 | lm loss: {R.uniform(1.8, 2.2):.6E} | loss scale: 1.0 | grad norm: 0.{R.randint(100, 999)} | number of skipped iterations:   0 | number of nan iterations:   0 |"
            for k in range(n)]


# ------------------------------------------------------------------------------ benign, many red herrings
case("benign_tee_prefixes", [
    *[tee(r, f"[W1104 03:0{r}:11.000000000 {4000 + r} torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank {r}]  using GPU {r} to perform barrier as devices used by this process are currently unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect.") for r in range(4)],
    *megatron_core(15),
    tee(0, " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 6738415616"),
    tee(2, "/usr/local/lib/python3.10/dist-packages/transformer_engine/pytorch/attention.py:4816: DeprecationWarning: window_size should be passed as a tuple"),
    *megatron_core(10, 20015),
], "none", "unknown")

case("benign_ray_train", [
    ray(4411, "10.2.0.17", "Setting up process group for: env:// [rank=0, world_size=8]"),
    ray(4412, "10.2.0.18", "Moving model to device: cuda:0"),
    *[ray(4411, "10.2.0.17", f"{{'epoch': 0, 'step': {s}, 'loss': {R.uniform(0.4, 1.1):.4f}, 'timestamp': 17300{R.randint(10000, 99999)}}}") for s in range(0, 400, 25)],
    "2024-11-04 05:06:07,890\tINFO tune_controller.py:1009 -- Wrote the latest version of all result files and experiment state to '/mnt/cluster_storage/run' in 0.0123s.",
    "Training finished iteration 16 at 2024-11-04 05:06:08. Total running time: 41min 3s",
], "none", "unknown")

case("benign_k8s_warnings_and_retries", [
    "llama-ft-worker-2: [W socket.cpp:697] [c10d] The client socket has failed to connect to [llama-ft-master-0]:23456 (errno: 111 - Connection refused).",
    "llama-ft-worker-2: [W socket.cpp:697] [c10d] The client socket has failed to connect to [llama-ft-master-0]:23456 (errno: 111 - Connection refused).",
    "llama-ft-worker-2: INFO: Rendezvous complete",
    *[f"llama-ft-worker-2: {l}" for l in accel_progress(12)],
    "llama-ft-worker-2: Warning: The default cache directory for DeepSpeed Triton autotune, /root/.triton/autotune, appears to be on an NFS system.",
    "llama-ft-worker-2: [2024-11-04 06:00:00,001] [WARNING] [stage3.py:2145:step] 2 pytorch allocator cache flushes since last step. this happens when there is high memory pressure and is detrimental to performance.",
    *[f"llama-ft-worker-2: {l}" for l in accel_progress(6)],
], "none", "unknown")

case("benign_error_words_in_metrics", [
    *[f"eval | step {s} | eval_loss 1.{R.randint(100, 999)} | top1_error 0.{R.randint(10, 40)} | timeout_count 0 | oom_retries 0" for s in range(0, 2000, 200)],
    "summary: errors=0 warnings=3 timeouts=0 nan_steps=0",
    "Saving checkpoint: /ckpt/step_2000 (failed_saves=0)",
], "none", "unknown")

case("benign_nccl_debug_full", [
    *[f"llm-pod-7:{300 + r}:{900 + r} [{r}] NCCL INFO comm 0x55d{R.getrandbits(24):06x} rank {r} nRanks 8 nNodes 1 localRanks 8 localRank {r} MNNVL 0" for r in range(8)],
    "llm-pod-7:300:900 [0] NCCL INFO NVLS multicast support is not available on dev 0",
    "llm-pod-7:301:901 [1] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0.",
    "llm-pod-7:302:902 [2] NCCL INFO Failed to open libibverbs.so[.1]",
    "llm-pod-7:302:902 [2] NCCL INFO NET/Socket : Using [0]eth0:10.8.1.7<0>",
    "llm-pod-7:303:903 [3] NCCL INFO P2P/CUMEM/CE enabled",
    *accel_progress(10),
], "none", "unknown")

case("benign_old_torch_nccl_blocking_warning", [
    "[W ProcessGroupNCCL.cpp:1569] Rank 0 using best-guess GPU 0 to perform barrier as devices used by this process are currently unknown.",
    "NCCL_BLOCKING_WAIT is set to 0; using default async error handling.",
    *[f"Epoch [{e}/90] Batch [{b}/5005] Loss 3.{R.randint(100, 999)} Acc@1 {R.randint(40, 70)}.{R.randint(0, 99)}" for e in range(2) for b in range(0, 5005, 1000)],
], "none", "unknown")

case("benign_checkpoint_retry_succeeded", [
    *megatron_core(5),
    "WARNING: checkpoint upload to s3://bucket/run7/iter_0020005 slow (38s), retrying in 5s",
    "INFO: checkpoint upload to s3://bucket/run7/iter_0020005 completed",
    *megatron_core(5, 20005),
], "none", "unknown")

case("benign_completed_with_cancel_of_extra_step", [
    *megatron_core(6),
    "[after training is done] datetime: 2024-11-05 10:00:00",
    "slurmstepd: error: *** STEP 818181.1 ON h100-045 CANCELLED AT 2024-11-05T10:00:05 ***",
], "none", "unknown", job={"state": "COMPLETED", "exit_code": 0})

# ------------------------------------------------------------------------------ nccl_timeout
lines = [*megatron_core(4)]
for r in range(8):
    if r == 3:
        continue
    lines.append(tee(r, f"[rank{r}]:[E1105 02:13:{10 + r}.{R.randint(100000000, 999999999)} {7000 + r} torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1207734, OpType=_ALLGATHER_BASE, NumelIn=65011712, NumelOut=520093696, Timeout(ms)=600000) ran for 600019 milliseconds before timing out."))
case("nccl_timeout_tee_rank3_missing", lines, "nccl_timeout", "unknown", ["k8s-gpu-0"], layout="k8s-gpu-0:8")

case("nccl_timeout_ray", [
    ray(5001, "10.2.0.17", "[E ProcessGroupNCCL.cpp:916] [Rank 2] NCCL watchdog thread terminated with exception: [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=55, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800091 milliseconds before timing out."),
    ray(5002, "10.2.0.18", "[E ProcessGroupNCCL.cpp:916] [Rank 5] NCCL watchdog thread terminated with exception: [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=55, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out."),
    "ray.exceptions.RayTaskError(DistBackendError): ray::_RayTrainWorker__execute.get_next() (pid=5001, ip=10.2.0.17)",
], "nccl_timeout", "unknown")

# ------------------------------------------------------------------------------ nccl_error
case("nccl_error_old_torch_error_number", [
    *[f"Epoch [3/90] Batch [{b}/5005] Loss 2.9{b % 10}" for b in range(0, 3000, 500)],
    "Traceback (most recent call last):",
    '  File "main.py", line 311, in train',
    "    loss.backward()",
    "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:784, unhandled system error, NCCL version 2.7.8",
], "nccl_error", "system_software")

case("nccl_error_socket_remote_k8s", [
    "trainer-worker-1: trainer-worker-1:88:120 [0] NCCL WARN NET/Socket : peer 10.8.3.4<47233> shutdown",
    "trainer-worker-1: trainer-worker-1:88:120 [0] NCCL INFO transport/net_socket.cc:474 -> 6",
    "trainer-worker-1: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, remote process exited or there was a network error, NCCL version 2.20.5",
    "trainer-worker-1: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    "trainer-worker-1: Last error:",
    "trainer-worker-1: NET/Socket : peer 10.8.3.4<47233> shutdown",
], "nccl_error", "network", job={"state": "FAILED", "exit_code": 1})

# ------------------------------------------------------------------------------ cuda_error
case("cuda_error_tee_assert", [
    *megatron_core(3),
    tee(6, "/opt/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:367: operator(): block: [3,0,0], thread: [17,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"` failed."),
    tee(6, "[rank6]: Traceback (most recent call last):"),
    tee(6, "[rank6]:   File \"/workspace/moe/router.py\", line 144, in forward"),
    tee(6, "[rank6]: RuntimeError: CUDA error: device-side assert triggered"),
    tee(6, "[rank6]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."),
], "cuda_error", "application")

case("cuda_error_launch_failure_with_xid13", [
    "worker-5: [Tue Nov  5 03:00:01 2024] NVRM: Xid (PCI:0000:ca:00): 13, pid=7117, name=python, Graphics SM Global Exception on (GPC 4, TPC 2, SM 1): Multiple Warp Errors",
    "worker-5: RuntimeError: CUDA error: unspecified launch failure",
], "cuda_error", "unknown", ["worker-5"])

# ------------------------------------------------------------------------------ gpu_oom
case("gpu_oom_deepspeed_stage3", [
    "[2024-11-04 07:00:00,001] [INFO] [utils.py:781:see_memory_usage] After initializing ZeRO optimizer MA 61.2 GB Max_MA 61.2 GB CA 62.0 GB Max_CA 62 GB",
    "[rank3]: Traceback (most recent call last):",
    "[rank3]:   File \"/app/train_dpo.py\", line 220, in <module>",
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 3 has a total capacity of 79.33 GiB of which 512.00 MiB is free.",
    "[2024-11-04 07:01:00,001] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train_dpo.py', '--local_rank=3'] exits with return code = 1",
], "gpu_oom", "resource")

case("gpu_oom_accelerate_find_batch", [
    *accel_progress(5),
    "RuntimeError: CUDA error: out of memory",
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
], "gpu_oom", "resource")

# ------------------------------------------------------------------------------ gpu_hardware
case("gpu_hardware_k8s_event_and_timeouts", [
    "llm-train-worker-3: kernel: [123456.789012] NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "llm-train-worker-3: kernel: [123456.789100] NVRM: GPU 0000:9b:00.0: GPU has fallen off the bus.",
    *[f"llm-train-worker-{w}: [rank{8 * w + 1}]:[E1105 04:00:00.1 1 ProcessGroupNCCL.cpp:616] [Rank {8 * w + 1}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9911, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600400 milliseconds before timing out." for w in (0, 1, 2)],
], "gpu_hardware", "hardware", ["llm-train-worker-3"])

case("gpu_hardware_xid_94_95_mix", [
    "Nov  5 05:00:00 h100-112 kernel: NVRM: Xid (PCI:0000:19:00): 94, pid=8118, name=python, Contained: SM (0x1). RST: No, D-RST: No",
    "Nov  5 05:00:07 h100-112 kernel: NVRM: Xid (PCI:0000:19:00): 95, pid=8118, name=python, Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
], "gpu_hardware", "hardware", ["h100-112"])

case("gpu_hardware_nvidia_smi_no_devices", [
    "h100-077: nvidia-smi: No devices were found",
    "h100-077: RuntimeError: No CUDA GPUs are available",
], "gpu_hardware", "system_software", ["h100-077"])

case("gpu_hardware_fabric_manager_down", [
    "Traceback (most recent call last):",
    "RuntimeError: CUDA error: system not yet initialized",
], "gpu_hardware", "system_software", ["h100-090"], job={"state": "FAILED", "exit_code": 1, "nodes": ["h100-090"]})

# ------------------------------------------------------------------------------ interconnect
case("interconnect_ib_status_newformat", [
    *megatron_core(4),
    "h100-101:12771:13011 [5] NCCL WARN NET/IB : Got completion from peer 10.12.0.88<39011> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 vendor err 129 (Send) localGid fe80::a288:c2ff:fe9f:3a1 remoteGids fe80::a288:c2ff:fe9f:3b0 hca mlx5_5",
    "h100-101:12771:13011 [5] NCCL INFO transport/net.cc:1298 -> 6",
    "[rank13]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2027, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
], "interconnect", "network", ["h100-101"])

case("interconnect_syslog_mlx5_link", [
    "2024-11-05T06:00:00.000000+00:00 h100-131 kernel: mlx5_core 0000:c1:00.0: mlx5_port_module_event:1131:(pid 0): Port module event[error]: module 0, Cable error, High Temperature",
    "2024-11-05T06:00:00.100000+00:00 h100-131 kernel: mlx5_core 0000:c1:00.0 ibp193s0: Link down",
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2027, unhandled system error, NCCL version 2.21.5",
], "interconnect", "network", ["h100-131"])

# ------------------------------------------------------------------------------ hang
case("hang_stall_no_text", [*megatron_core(40)], "hang", "unknown", hang_suspected=True, job={"state": "RUNNING"})
case("hang_heartbeat_tee", [
    *megatron_core(5),
    tee(0, "[rank0]:[E1105 07:07:07.000000 1 ProcessGroupNCCL.cpp:1422] [PG ID 0 PG GUID 0(default_pg) Rank 0] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=2"),
], "hang", "unknown")

# ------------------------------------------------------------------------------ node_failure
case("node_failure_stepd_not_ending", [
    *megatron_core(3),
    "srun: error: h100-140: task 12: Killed",
    "slurmstepd: error: *** JOB 919191 STEPD TERMINATED ON h100-141 AT 2024-11-05T08:00:00 DUE TO JOB NOT ENDING WITH SIGNALS ***",
], "node_failure", "node", ["h100-141"])

case("node_failure_node_state_down", [
    *megatron_core(8),
    "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2027, remote process exited or there was a network error, NCCL version 2.21.5",
], "node_failure", "node", ["h100-150"],
    job={"state": "NODE_FAIL", "nodes": ["h100-149", "h100-150"]},
    nodes=[{"name": "h100-150", "state": "DOWN", "reason": "Node unexpectedly rebooted boot=1730790000 last response=1730789400"}])

# ------------------------------------------------------------------------------ time_limit / preempted
case("time_limit_step_line_and_sigterm_traceback", [
    *megatron_core(6),
    "slurmstepd: error: *** STEP 828282.0 ON h100-160 CANCELLED AT 2024-11-06T00:00:00 DUE TO TIME LIMIT ***",
    "[rank0]: Traceback (most recent call last):",
    "[rank0]: KeyboardInterrupt",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
], "time_limit", "scheduler")

case("preempted_state_and_sigterm", [
    *accel_progress(6),
    "Received SIGTERM: saving a checkpoint before exit",
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 991 got signal: 15",
], "preempted", "scheduler", job={"state": "PREEMPTED"})

# ------------------------------------------------------------------------------ app_error
case("app_error_ray_value_error", [
    ray(6001, "10.2.0.17", "Traceback (most recent call last):"),
    ray(6001, "10.2.0.17", "  File \"/home/ray/train.py\", line 90, in train_func"),
    ray(6001, "10.2.0.17", "ValueError: Cannot find column 'input_ids' in dataset; available: ['text']"),
], "app_error", "application")

case("app_error_hydra_config", [
    "Error executing job with overrides: ['model=llama3_8b', 'trainer.devices=8']",
    "Traceback (most recent call last):",
    "omegaconf.errors.ConfigAttributeError: Key 'seq_length' is not in struct",
    "    full_key: model.seq_length",
    "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
], "app_error", "application")

case("app_error_nan_megatron", [
    *megatron_core(5),
    "[rank0]: AssertionError: Rank 0: found NaN in local grad norm for bucket #0 in backward pass before data-parallel communication collective. Device: 0, node: h100-170",
], "app_error", "application")

case("app_error_segfault_native", [
    *accel_progress(4),
    "Fatal Python error: Segmentation fault",
    "",
    "Thread 0x00007f00aa000700 (most recent call first):",
    "  File \"/usr/lib/python3.10/threading.py\", line 324 in wait",
    "srun: error: h100-171: task 0: Segmentation fault (core dumped)",
], "app_error", "application")

# ------------------------------------------------------------------------------ data_io
case("data_io_lustre_eio_k8s", [
    "trainer-worker-4: LustreError: 11-0: scratch-OST0012-osc-ffff9a: operation ost_read to node 10.9.0.12@o2ib failed: rc = -110",
    "trainer-worker-4: OSError: [Errno 5] Input/output error: '/lustre/scratch/tokens/train_00881.bin'",
], "data_io", "system_software", ["trainer-worker-4"])

case("data_io_ckpt_corrupt_resume", [
    "Loading checkpoint from /ckpt/run9/latest ...",
    "Traceback (most recent call last):",
    "  File \"/app/resume.py\", line 40, in load",
    "_pickle.UnpicklingError: invalid load key, '\\x00'.",
], "data_io", "application")

case("data_io_quota_deepspeed", [
    "[2024-11-06 01:00:00,000] [INFO] [engine.py:3300:_save_checkpoint] Saving model checkpoint: /home/u/ckpt/global_step500/zero_pp_rank_0_mp_rank_00_model_states.pt",
    "OSError: [Errno 122] Disk quota exceeded: '/home/u/ckpt/global_step500/zero_pp_rank_0_mp_rank_00_optim_states.pt'",
], "data_io", "resource")

# ------------------------------------------------------------------------------ host_oom
case("host_oom_ray_worker_killed", [
    ray(7001, "10.2.0.19", "Epoch 3: loss=0.512"),
    "(raylet, ip=10.2.0.19) [2024-11-06 02:00:00,000 E 401 401] (raylet) node_manager.cc:3064: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: abc, IP: 10.2.0.19) over the last time period.",
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
], "host_oom", "resource")

case("host_oom_bash_killed", [
    *megatron_core(3),
    "/var/spool/slurmd/job929292/slurm_script: line 41: 181818 Killed                  python pretrain.py $ARGS",
    "slurmstepd: error: Detected 1 oom_kill event in StepId=929292.batch. Some of the step tasks have been OOM Killed.",
], "host_oom", "resource")

case("host_oom_shm_bus_error", [
    *accel_progress(3),
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
    "RuntimeError: DataLoader worker (pid 9191) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
], "host_oom", "resource")


def main() -> None:
    SPLIT.write()


if __name__ == "__main__":
    main()
