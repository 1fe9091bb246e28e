"""Writes the *held-out* split of the labelled corpus (tests/corpus/holdout/).

Written in a different style from the tuning split on purpose: other launchers
(mpirun --tag-output, pdsh, plain torchrun without srun labels), Python logging
and JSON-lines formats, cloud-style host names, older and newer wordings of the
same failures, and failures buried in longer, noisier excerpts. The engine is
never tuned on these cases; bench/attribution.py reports their figures separately.

Run: .venv/bin/python tests/corpus/generate_holdout.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from corpus_split import Split

OUT = Path(__file__).with_name("holdout")
R = random.Random(777)


def noise_py_logging(host: str, n: int) -> list[str]:
    out = []
    for k in range(n):
        it = 1000 + k * 10 + R.randint(0, 9)
        out.append(f"2024-09-1{R.randint(0, 9)} 0{R.randint(0, 9)}:{R.randint(10, 59)}:{R.randint(10, 59)},{R.randint(100, 999)} - INFO - trainer - "
                   f"[{host}] global_step={it} train/loss={R.uniform(1, 3):.4f} train/lr={R.uniform(1e-5, 1e-4):.2e} throughput={R.randint(900, 1500)} samples/s")
    return out


def noise_json(host: str, n: int) -> list[str]:
    out = []
    for k in range(n):
        out.append(json.dumps({"ts": f"2024-10-02T11:{R.randint(10, 59)}:{R.randint(10, 59)}Z", "host": host, "level": "info",
                               "msg": "train step", "step": 5000 + k, "loss": round(R.uniform(1, 2.5), 3), "tokens_per_sec": R.randint(30000, 90000)}))
    return out


def noise_nemo(n: int) -> list[str]:
    return [f"Epoch 0: :  {R.randint(1, 60)}%|██▍   | {1200 + k}/5000 [1:{R.randint(10, 59)}:{R.randint(10, 59)}<3:11:02, reduced_train_loss={R.uniform(1.5, 3):.3f}, global_step={1200 + k}.0, consumed_samples={(1200 + k) * 256}.0, train_step_timing in s={R.uniform(1, 3):.2f}]"
            for k in range(n)]


def mpi(rank: int, text: str, stream: str = "stderr") -> str:
    return f"[1,{rank}]<{stream}>:{text}"


def nccl(host: str, rank: int, text: str) -> str:
    return f"{host}:{R.randint(2000, 60000)}:{R.randint(2000, 60000)} [{rank % 8}] NCCL {text}"


SPLIT = Split(OUT)
case = SPLIT.case


# ------------------------------------------------------------------------------------- benign
H = [f"ip-10-0-3-{n}" for n in (17, 18, 21, 22)]
case("benign_mpirun_chatty", [
    *[mpi(r, nccl(H[r // 8], r, "INFO cudaDriverVersion 12020"), "stdout") for r in range(0, 16, 3)],
    mpi(0, nccl(H[0], 0, "INFO NET/OFI Selected Provider is efa (found 4 nics)"), "stdout"),
    mpi(3, nccl(H[0], 3, "WARN NET/OFI Failed to load libnccl-net.so; falling back to libnccl-net-aws.so"), "stdout"),
    mpi(5, "/usr/lib/python3.10/site-packages/torch/cuda/__init__.py:628: UserWarning: Can't initialize NVML"),
    *[mpi(0, l, "stdout") for l in noise_py_logging(H[0], 12)],
    mpi(0, "2024-09-11 04:22:10,101 - WARNING - trainer - loss scale overflow, skipping step 1240; loss scale reduced to 4096", "stdout"),
    *[mpi(0, l, "stdout") for l in noise_py_logging(H[0], 6)],
    mpi(0, "2024-09-11 05:00:00,000 - INFO - trainer - training finished after 2000 steps", "stdout"),
], "none", "unknown", layout=f"{','.join(H[:2])}:8")

case("benign_json_lines", [
    *noise_json("a3-highgpu-8g-12", 20),
    json.dumps({"ts": "2024-10-02T11:40:00Z", "host": "a3-highgpu-8g-12", "level": "warning", "msg": "UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly"}),
    *noise_json("a3-highgpu-8g-12", 10),
    json.dumps({"ts": "2024-10-02T11:55:00Z", "host": "a3-highgpu-8g-12", "level": "info", "msg": "checkpoint saved", "step": 6000, "path": "gs://bkt/ckpt/6000"}),
], "none", "unknown")

case("benign_nemo_progress", [
    "[NeMo W 2024-08-01 10:00:01 nemo_logging:349] /opt/NeMo/nemo/collections/nlp/modules/common/megatron/megatron_init.py:216: UserWarning: Apex was not found.",
    "[NeMo I 2024-08-01 10:00:02 megatron_init:251] Rank 0 has data parallel group : [0, 8, 16, 24]",
    *noise_nemo(25),
    "[NeMo I 2024-08-01 12:00:02 nemo_model_checkpoint:226] Checkpoint save for step 1225 finished in 14.2 s",
    "huggingface/tokenizers: The current process just got forked, after parallelism has already been used. Disabling parallelism to avoid deadlocks...",
    *noise_nemo(10),
], "none", "unknown")

case("benign_deepspeed_overflow", [
    *[f"[2024-08-03 0{k % 10}:11:0{k % 10},{100 + k}] [INFO] [logging.py:96:log_dist] [Rank 0] step={3000 + k}, skipped={k // 4}, lr=[0.0001], mom=[[0.9, 0.999]]" for k in range(15)],
    "[2024-08-03 01:11:02,100] [INFO] [fused_optimizer.py:362:_update_scale] Grad overflow on iteration 3005",
    "[2024-08-03 01:11:02,101] [INFO] [fused_optimizer.py:363:_update_scale] Reducing dynamic loss scale from 65536 to 32768.0",
    "[2024-08-03 01:11:02,102] [INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: 65536, reducing to 32768",
    "[2024-08-03 01:20:00,000] [INFO] [engine.py:3245:_save_checkpoint] [Rank 0] Saving model checkpoint: /ckpt/global_step3100/mp_rank_00_model_states.pt",
    "[2024-08-03 01:20:09,000] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint global_step3100 is ready now!",
], "none", "unknown")

case("benign_config_dump", [
    "------------------------ arguments ------------------------",
    "  distributed_timeout_minutes ..................... 30",
    "  exit_on_missing_checkpoint ...................... False",
    "  check_for_nan_in_loss_and_grad .................. True",
    "  fp16_lm_cross_entropy ........................... False",
    "  error_injection_rate ............................ 0",
    "  no_load_optim ................................... None",
    "-------------------- end of arguments ---------------------",
    "> initializing torch distributed ...",
    "[W init.cpp:767] Warning: nvfuser is no longer supported in torch script, use _set_nvfuser_enabled is deprecated and a no-op (function operator())",
    *[f" iteration {100 * k:>8}/  100000 | consumed samples: {k * 51200:>10} | elapsed time per iteration (ms): 1042.7 | lm loss: 3.1{k:02d}E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |" for k in range(1, 12)],
], "none", "unknown")

case("benign_pdsh_health", [
    *[f"sc-gpu-r07-n{n}: GPU 0000:{b}:00.0: OK  ECC SBE=0 DBE=0 retired=0 remap_pending=No remap_failure=No" for n in (1, 2, 3) for b in ("18", "3b")],
    "sc-gpu-r07-n2: nvidia-smi: all 8 GPUs healthy",
    *noise_py_logging("sc-gpu-r07-n1", 8),
], "none", "unknown")

case("benign_tcpstore_retry_then_ok", [
    "[W socket.cpp:464] [c10d] The server socket cannot be initialized on [::]:29400 (errno: 97 - Address family not supported by protocol).",
    "[W socket.cpp:697] [c10d] The client socket has failed to connect to [worker-0.train.svc]:29400 (errno: 111 - Connection refused).",
    "[W socket.cpp:697] [c10d] The client socket has failed to connect to [worker-0.train.svc]:29400 (errno: 111 - Connection refused).",
    "INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:",
    *noise_py_logging("worker-1", 10),
], "none", "unknown")

case("benign_lightning_done", [
    "GPU available: True (cuda), used: True",
    "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3,4,5,6,7]",
    "/opt/conda/lib/python3.11/site-packages/lightning/pytorch/trainer/connectors/data_connector.py:441: The 'val_dataloader' does not have many workers which may be a bottleneck.",
    *[f"Epoch 2: 100%|██████████| 938/938 [02:11<00:00,  7.13it/s, v_num=12, train_loss=0.{300 - k}, val_loss=0.41, val_error=0.0{k % 10}]" for k in range(8)],
    "`Trainer.fit` stopped: `max_epochs=3` reached.",
], "none", "unknown")

case("benign_wandb_retry", [
    *noise_py_logging("cn0412", 6),
    "wandb: Network error (ConnectionError), entering retry loop.",
    "wandb: WARNING A graphql request initiated by the public wandb API timed out (timeout=19 sec). Create a new API with an integer timeout larger than 19",
    *noise_py_logging("cn0412", 6),
], "none", "unknown")

case("benign_nccl_env_warn", [
    nccl("g0042", 0, "WARN NCCL_SOCKET_NTHREADS is deprecated and will be ignored"),
    nccl("g0042", 3, "INFO NCCL_P2P_LEVEL set by environment to NVL"),
    nccl("g0042", 4, "INFO Could not enable P2P between dev 4(=9a000) and dev 0(=1b000)"),
    nccl("g0043", 9, "INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"),
    *noise_nemo(15),
], "none", "unknown")

case("benign_xid_63_only", [
    "Oct  4 03:12:44 gpu-b-09 kernel: NVRM: Xid (PCI:0000:41:00): 63, pid=0, Row Remapper: New row (0x0000000012ab45) marked for remapping, reset gpu to activate.",
    *noise_py_logging("gpu-b-09", 15),
], "none", "unknown", job={"state": "COMPLETED", "exit_code": 0})

case("benign_exit_advisory_224", [
    *noise_nemo(12),
    "[rank3]:[W930 10:21:33.120304829 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL. On normal program exit, the application should call destroy_process_group to ensure that any pending NCCL operations have finished in this process. In rare cases this process can exit before this point and block the progress of another member of the process group. This constraint has always been present,  but this warning has only recently been added to the message. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())",
    "[rank0]:[W930 10:21:33.220304829 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL. (function operator())",
], "none", "unknown")

# ------------------------------------------------------------------------------------- nccl_timeout
HN = [f"ip-10-0-3-{n}" for n in (17, 18)]
lines = [*[mpi(0, l, "stdout") for l in noise_py_logging(HN[0], 8)]]
for r in range(16):
    if r != 13:
        lines.append(mpi(r, f"[rank{r}]:[E1002 07:11:0{r % 10}.{R.randint(100000, 999999)} {R.randint(1000, 9999)} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=40112, OpType=_REDUCE_SCATTER_BASE, NumelIn=1310720, NumelOut=81920, Timeout(ms)=1200000) ran for 1200041 milliseconds before timing out."))
case("nccl_timeout_mpirun_rank13_silent", lines, "nccl_timeout", "unknown", [HN[1]], layout=f"{','.join(HN)}:8")

lines = [*noise_nemo(10)]
for r in (0, 1, 2, 3, 4, 5, 6, 7):
    seq = 880 if r != 2 else 879
    lines.append(f"[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1800874 milliseconds before timing out.")
case("nccl_timeout_old_torch_behind", lines, "nccl_timeout", "unknown", ["dgx-a-01"], layout="dgx-a-01:8")

case("nccl_timeout_single_rank_view", [
    *noise_py_logging("trn-7", 10),
    "[E ProcessGroupNCCL.cpp:828] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=BROADCAST, Timeout(ms)=600000) ran for 600451 milliseconds before timing out.",
    "[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
    "[E ProcessGroupNCCL.cpp:460] To avoid data inconsistency, we are taking the entire process down.",
    "terminate called after throwing an instance of 'std::runtime_error'",
    "  what():  [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=BROADCAST, Timeout(ms)=600000) ran for 600451 milliseconds before timing out.",
], "nccl_timeout", "unknown")

# ------------------------------------------------------------------------------------- nccl_error
case("nccl_error_internal_json", [
    *noise_json("a3-highgpu-8g-3", 8),
    json.dumps({"ts": "2024-10-02T12:00:00Z", "host": "a3-highgpu-8g-3", "level": "error", "msg": "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2006, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5"}),
    json.dumps({"ts": "2024-10-02T12:00:00Z", "host": "a3-highgpu-8g-3", "level": "error", "msg": "ncclInternalError: Internal check failed."}),
], "nccl_error", "system_software")

case("nccl_error_system_pdsh", [
    "cn0101: " + nccl("cn0101", 2, "WARN socketStartConnect: Connect to 172.16.4.9<58712> failed : Software caused connection abort"),
    "cn0101: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3",
    "cn0101: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
    "cn0102: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.14.3",
], "nccl_error", "system_software")

# ------------------------------------------------------------------------------------- cuda_error
case("cuda_error_assert_mpirun", [
    *[mpi(0, l, "stdout") for l in noise_py_logging("gpu-b-11", 6)],
    mpi(5, "/opt/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [7,0,0] Assertion `t >= 0 && t < n_classes` failed."),
    mpi(5, "Traceback (most recent call last):"),
    mpi(5, '  File "/app/train.py", line 210, in <module>'),
    mpi(5, "torch.AcceleratorError: CUDA error: device-side assert triggered"),
    mpi(5, "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."),
], "cuda_error", "application")

case("cuda_error_illegal_address_logging", [
    *noise_py_logging("h200-12", 8),
    "2024-09-12 01:02:03,004 - ERROR - trainer - step failed: CUDA error: an illegal memory access was encountered",
    "Traceback (most recent call last):",
    '  File "/app/kernels/fused_moe.py", line 88, in moe_align',
    "RuntimeError: CUDA error: an illegal memory access was encountered",
], "cuda_error", "application")

# ------------------------------------------------------------------------------------- gpu_oom
case("gpu_oom_logging_fsdp", [
    *noise_py_logging("h200-3", 6),
    "Traceback (most recent call last):",
    '  File "/app/fsdp_train.py", line 301, in train_step',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 5 has a total capacity of 139.72 GiB of which 2.11 GiB is free. Process 88123 has 137.60 GiB memory in use.",
    "[rank2]:[E1011 03:03:03.000000 1 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLGATHER, NumelIn=1, NumelOut=8, Timeout(ms)=600000) ran for 600100 milliseconds before timing out.",
], "gpu_oom", "resource")

case("gpu_oom_nccl_warn_json", [
    json.dumps({"host": "a3-highgpu-8g-7", "level": "warn", "msg": "a3-highgpu-8g-7:1291:1420 [6] NCCL WARN Cuda failure 2 'out of memory'"}),
    json.dumps({"host": "a3-highgpu-8g-7", "level": "error", "msg": "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"}),
], "gpu_oom", "resource")

# ------------------------------------------------------------------------------------- gpu_hardware
HG = ["sc-gpu-r07-n1", "sc-gpu-r07-n2", "sc-gpu-r07-n3", "sc-gpu-r07-n4"]
lines = [*noise_nemo(6)]
lines += ["sc-gpu-r07-n3: [Thu Oct  3 01:02:03 2024] NVRM: Xid (PCI:0000:c1:00): 79, pid=4410, name=pt_main_thread, GPU has fallen off the bus."]
lines += [f"[rank{r}]:[E1003 01:12:03.{R.randint(100000, 999999)} {R.randint(100, 999)} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=311, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600700 milliseconds before timing out." for r in range(0, 32, 5)]
case("gpu_hardware_pdsh_dmesg_xid79", lines, "gpu_hardware", "hardware", ["sc-gpu-r07-n3"], layout=f"{','.join(HG)}:8")

case("gpu_hardware_iso_syslog_dbe", [
    "2024-10-05T04:01:02.123456+00:00 gpu-b-04 kernel: NVRM: Xid (PCI:0000:4e:00): 48, pid=9981, name=python, Ch 00000008, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 3, subpartition 0.",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
], "gpu_hardware", "hardware", ["gpu-b-04"])

case("gpu_hardware_drain_reason_only", [
    *noise_py_logging("gpu-b-01", 6),
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5",
], "gpu_hardware", "hardware", ["gpu-b-02"],
    job={"state": "FAILED", "exit_code": 1, "nodes": ["gpu-b-01", "gpu-b-02"]},
    nodes=[{"name": "gpu-b-02", "state": "MIXED", "flags": ["DRAIN"], "reason": "DCGM: double-bit ECC errors on GPU 3"}])

case("gpu_hardware_gsp_120", [
    "Nov  1 09:09:09 h100-s2-17 kernel: NVRM: Xid (PCI:0000:9d:00): 120, pid=2231, name=python3, GSP task timeout @ pc:0x4bd36ec, task: 1",
    "[rank4]: RuntimeError: CUDA error: unspecified launch failure",
], "gpu_hardware", "hardware", ["h100-s2-17"])

case("gpu_hardware_sympathetic_then_lost", [
    "Nov  2 10:00:00 h100-s2-21 kernel: NVRM: Xid (PCI:0000:1a:00): 45, pid=1, name=python, Ch 00000001",
    "Nov  2 10:00:01 h100-s2-21 kernel: NVRM: Xid (PCI:0000:1a:00): 43, pid=1, name=python, Ch 00000001",
    "h100-s2-21: Unable to determine the device handle for GPU0000:1A:00.0: Unknown Error",
], "gpu_hardware", "hardware", ["h100-s2-21"])

# ------------------------------------------------------------------------------------- sympathetic only: not hardware
case("cuda_error_xid31_app_fault", [
    "Nov  2 11:00:00 h100-s2-30 kernel: NVRM: Xid (PCI:0000:1a:00): 31, pid=771, name=python, Ch 00000018, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_4 faulted @ 0x7f1c_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
    "Traceback (most recent call last):",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
], "cuda_error", "application")

# ------------------------------------------------------------------------------------- interconnect
case("interconnect_ib_retry_mpirun", [
    mpi(9, nccl("ip-10-0-3-18", 9, "WARN NET/IB : Got completion from peer 10.0.3.22<51234> with error 12, opcode 129, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.3.18 remoteGids::ffff:10.0.3.22 hca mlx5_2")),
    mpi(9, "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error, NCCL version 2.19.3"),
    mpi(2, "RuntimeError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.19.3"),
], "interconnect", "network", ["ip-10-0-3-18"], layout="ip-10-0-3-17,ip-10-0-3-18:8")

case("interconnect_ucx_json", [
    *noise_json("cn0777", 5),
    json.dumps({"host": "cn0777", "level": "error", "msg": "[1727000000.123456] [cn0777:4411:0]    rc_verbs_iface.c:63   UCX  ERROR send completion with error: transport retry counter exceeded"}),
], "interconnect", "network", ["cn0777"])

case("interconnect_nvlink_xid74", [
    "gpu-b-07: NVRM: Xid (PCI:0000:4e:00): 74, pid=3030, name=python, NVLink: fatal error detected on link 11(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.",
], "interconnect", "hardware", ["gpu-b-07"])

# ------------------------------------------------------------------------------------- hang
case("hang_progress_stops", [*noise_nemo(30)], "hang", "unknown", hang_suspected=True, job={"state": "RUNNING"})
case("hang_watchdog_stuck_json", [
    *noise_json("a3-highgpu-8g-5", 6),
    json.dumps({"host": "a3-highgpu-8g-5", "level": "error", "msg": "[PG ID 0 PG GUID 0(default_pg) Rank 6] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives."}),
], "hang", "unknown")

# ------------------------------------------------------------------------------------- node_failure
case("node_failure_srun_pdsh", [
    *noise_py_logging("cn0101", 5),
    "srun: error: Node failure on cn0104",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "slurmstepd: error: *** STEP 771234.0 ON cn0101 CANCELLED AT 2024-10-10T10:10:10 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    "cn0102: torch.distributed.DistNetworkError: Connection reset by peer",
], "node_failure", "node", ["cn0104"])

case("node_failure_state_with_preempt_words", [
    "Checkpointing before the job is preempted or requeued...",
    "[W socket.cpp:464] [c10d] The client socket has failed to connect to [cn0201]:29500 (errno: 113 - No route to host).",
], "node_failure", "node", ["cn0203"],
    job={"state": "NODE_FAIL", "reason": "NodeFail", "nodes": ["cn0201", "cn0202", "cn0203"]},
    nodes=[{"name": "cn0203", "state": "DOWN", "flags": ["NOT_RESPONDING"], "reason": "Not responding"}])

# ------------------------------------------------------------------------------------- time_limit / preempted
case("time_limit_iso_json", [
    *noise_json("cn0412", 12),
    "slurmstepd: error: *** JOB 881100 ON cn0412 CANCELLED AT 2024-10-12T23:59:59 DUE TO TIME LIMIT ***",
    json.dumps({"host": "cn0412", "level": "error", "msg": "torch.distributed.elastic.multiprocessing.api.SignalException: Process 77 got signal: 15"}),
], "time_limit", "scheduler")

case("time_limit_state_only", [*noise_nemo(20), "srun: Job step aborted: Waiting up to 62 seconds for job step to finish."],
     "time_limit", "scheduler", job={"state": "TIMEOUT"})

case("preempted_node_died_words", [
    *noise_py_logging("cn0301", 5),
    "[E] torchelastic agent: node cn0302 died; rendezvous round 3 closed",
    "torch.distributed.elastic.rendezvous.api.RendezvousClosedError",
], "preempted", "scheduler", job={"state": "PREEMPTED", "reason": "Preempted"})

case("preempted_requeue_line", [
    *noise_nemo(8),
    "slurmstepd: error: *** JOB 990011 ON cn0310 CANCELLED AT 2024-10-13T04:00:00 DUE TO PREEMPTION ***",
    "[rank0]: RuntimeError: NCCL communicator was aborted on rank 0.",
], "preempted", "scheduler")

# ------------------------------------------------------------------------------------- app_error
case("app_error_logging_keyerror", [
    *noise_py_logging("h200-9", 4),
    "Traceback (most recent call last):",
    '  File "/app/data/mixture.py", line 77, in __getitem__',
    "    weight = self.weights[name]",
    "KeyError: 'code_python'",
    "[rank1]:[E1011 03:03:03.000000 1 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1901, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600100 milliseconds before timing out.",
], "app_error", "application")

case("app_error_duplicate_gpu_mpirun", [
    mpi(1, nccl("g0042", 1, "WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 18000")),
    mpi(1, "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.18.6"),
], "app_error", "application")

case("app_error_import_json", [
    json.dumps({"host": "cn0009", "level": "error", "msg": "Traceback (most recent call last):"}),
    json.dumps({"host": "cn0009", "level": "error", "msg": "ImportError: cannot import name 'LlamaFlashAttention2' from 'transformers.models.llama.modeling_llama'"}),
], "app_error", "application")

case("app_error_exit93", [*noise_nemo(5), "srun: error: cn0500: task 0: Exited with exit code 93"], "app_error", "application",
     job={"state": "FAILED", "exit_code": 93})

# ------------------------------------------------------------------------------------- data_io
case("data_io_enospc_logging", [
    *noise_py_logging("cn0700", 5),
    "2024-09-12 02:00:00,000 - INFO - ckpt - saving checkpoint step 20000",
    "Traceback (most recent call last):",
    "RuntimeError: [enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/44: file write failed",
    "OSError: [Errno 28] No space left on device",
], "data_io", "resource")

case("data_io_stale_pdsh", [
    "cn0802: OSError: [Errno 116] Stale file handle: '/gpfs/proj/tokens/shard-00102.bin'",
    "cn0801: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5",
], "data_io", "system_software", ["cn0802"])

case("data_io_safetensors", [
    "Traceback (most recent call last):",
    "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer",
], "data_io", "application")

# ------------------------------------------------------------------------------------- host_oom
case("host_oom_slurm_2205", [
    *noise_nemo(6),
    "slurmstepd: error: Detected 2 oom-kill event(s) in StepId=515151.0 cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.",
    "srun: error: cn0901: task 3: Out Of Memory",
], "host_oom", "resource")

case("host_oom_dataloader_exited", [
    *noise_py_logging("cn0902", 4),
    "RuntimeError: DataLoader worker (pid(s) 88121, 88122) exited unexpectedly",
], "host_oom", "resource", job={"state": "FAILED", "exit_code": 1})

case("host_oom_memcg_json", [
    json.dumps({"host": "cn0903", "level": "warn", "msg": "Memory cgroup out of memory: Killed process 4411 (pt_data_worker) total-vm:9120332kB, anon-rss:8123312kB"}),
    json.dumps({"host": "cn0903", "level": "error", "msg": "exitcode  : -9 (pid: 4410)"}),
], "host_oom", "resource")


def main() -> None:
    SPLIT.write()


if __name__ == "__main__":
    main()
