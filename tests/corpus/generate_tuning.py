"""Writes the *tuning* split of the labelled corpus (tests/corpus/tuning/).

Each case is a synthetic but realistic failure excerpt: training progress in one of
several framework formats, NCCL/launcher chatter, harmless look-alikes, then the
failure and its fallout on other ranks. Hosts, ranks, torch/NCCL versions, prefixes
(srun --label, torch [rankN]:, none) and noise vary with a seeded RNG; every line
is written here, none is copied from a real log.

Run: .venv/bin/python tests/corpus/generate_tuning.py   (rewrites the split deterministically)
The held-out split (tests/corpus/holdout/) is written by hand-styled templates in
generate_holdout.py and is never used to tune patterns or rules.
"""

from __future__ import annotations

import random
from pathlib import Path

from corpus_split import expected as exp
from corpus_split import start_afresh, write_case

OUT = Path(__file__).with_name("tuning")

HOST_SCHEMES = [
    lambda i: f"node{i + 1}",
    lambda i: f"gpu-a100-{i + 1:03d}",
    lambda i: f"dgx{i + 11:02d}",
    lambda i: f"hpc-c2-n{i + 40}",
    lambda i: f"h100-rack3-{i + 1:02d}",
    lambda i: f"cn{i + 201}",
]
TORCH = ["1.13", "2.0", "2.1", "2.3", "2.4", "2.5"]
NCCL = ["2.14.3", "2.18.1", "2.18.6", "2.19.3", "2.20.5", "2.21.5"]
OPS = ["ALLREDUCE", "_ALLGATHER_BASE", "_REDUCE_SCATTER_BASE", "BROADCAST", "ALLGATHER", "COALESCED"]


class Case:
    def __init__(self, rng: random.Random, *, nodes: int | None = None, per_node: int | None = None) -> None:
        self.rng = rng
        scheme = rng.choice(HOST_SCHEMES)
        self.n_nodes = nodes or rng.choice([1, 2, 2, 4, 4, 8])
        self.per_node = per_node or rng.choice([4, 8, 8])
        self.hosts = [scheme(i) for i in range(self.n_nodes)]
        self.world = self.n_nodes * self.per_node
        self.torch = rng.choice(TORCH)
        self.nccl = rng.choice(NCCL)
        self.prefix_style = rng.choice(["srun", "srun", "torch", "plain"])
        self.lines: list[str] = []
        self.iteration = rng.randint(100, 90000)
        self.job_id = rng.randint(100000, 999999)
        self.fmt = rng.choice(["megatron", "hf", "lightning", "deepspeed", "titan", "plain"])
        self.sidecar: dict = {"layout": f"{','.join(self.hosts)}:{self.per_node}"}
        self.ts_h = rng.randint(0, 20)
        self.ts_m = rng.randint(0, 59)

    # -------------------------------------------------------------- helpers
    def host_of(self, rank: int) -> str:
        return self.hosts[rank // self.per_node]

    def stamp(self) -> str:
        self.ts_m += self.rng.randint(0, 2)
        if self.ts_m > 59:
            self.ts_m -= 60
            self.ts_h = (self.ts_h + 1) % 24
        return f"2024-05-{self.rng.randint(1, 28):02d} {self.ts_h:02d}:{self.ts_m:02d}:{self.rng.randint(0, 59):02d}"

    def pre(self, rank: int) -> str:
        if self.prefix_style == "srun":
            return f"{rank}: "
        if self.prefix_style == "torch" and self.torch >= "2.2":
            return f"[rank{rank}]:"
        return ""

    def add(self, text: str, rank: int = 0) -> None:
        self.lines.append(self.pre(rank) + text)

    def glog(self, level: str, src: str, rank: int) -> str:
        if self.torch >= "2.2":
            return f"[{level}{self.rng.randint(101, 1231)} {self.ts_h:02d}:{self.ts_m:02d}:{self.rng.randint(10, 59)}.{self.rng.randint(100000, 999999)} {self.rng.randint(1000, 99999)} {src}:{self.rng.randint(400, 2000)}]"
        return f"[{level} {src}:{self.rng.randint(400, 2000)}]"

    def nccl_prefix(self, rank: int) -> str:
        return f"{self.host_of(rank)}:{self.rng.randint(1000, 90000)}:{self.rng.randint(1000, 90000)} [{rank % self.per_node}]"

    # -------------------------------------------------------------- noise
    def progress(self, n: int) -> None:
        for _ in range(n):
            self.iteration += self.rng.randint(1, 10)
            it, loss = self.iteration, round(self.rng.uniform(1.2, 3.5), 4)
            f = self.fmt
            if f == "megatron":
                self.add(f" [{self.stamp()}] iteration {it:8d}/  500000 | consumed samples: {it * 512:12d} | elapsed time per iteration (ms): {self.rng.uniform(700, 1900):.1f} | learning rate: 2.9E-04 | global batch size:   512 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {self.rng.uniform(0.2, 2):.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")
            elif f == "hf":
                self.add(f"{{'loss': {loss}, 'grad_norm': {self.rng.uniform(0.1, 3):.4f}, 'learning_rate': {self.rng.uniform(1e-5, 3e-4):.3e}, 'epoch': {it / 10000:.2f}}}")
            elif f == "lightning":
                self.add(f"Epoch {it // 5000}:  {self.rng.randint(1, 99)}%|####      | {it % 5000}/5000 [12:{self.rng.randint(10, 59)}<20:11,  {self.rng.uniform(1, 9):.2f}it/s, loss={loss:.3f}, v_num=3]")
            elif f == "deepspeed":
                self.add(f"[{self.stamp()},{self.rng.randint(100, 999)}] [INFO] [logging.py:96:log_dist] [Rank 0] step={it}, skipped=0, lr=[0.00029], mom=[(0.9, 0.95)]")
                self.add(f"steps: {it} loss: {loss:.4f} iter time (s): {self.rng.uniform(0.5, 2):.3f} samples/sec: {self.rng.uniform(100, 900):.3f}")
            elif f == "titan":
                self.add(f"[titan] {self.stamp()},{self.rng.randint(100, 999)} - root - INFO - step: {it:5d}  loss: {loss:.4f}  memory: 61.2GiB(77.3%)  tps: {self.rng.randint(2000, 9000):,}  mfu: 41.2%")
            else:
                self.add(f"step {it} loss {loss:.4f} lr 3.0e-04 tokens/s {self.rng.randint(90000, 400000)}")

    def nccl_chatter(self, n: int) -> None:
        msgs = [
            "NCCL INFO Bootstrap : Using ib0:10.{a}.{b}.{c}<0>",
            "NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
            "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.{a}.{b}.{c}<0>",
            "NCCL INFO Channel {ch:02d}/0 : {r}[{l}] -> {r2}[{l2}] via P2P/IPC/read",
            "NCCL INFO Connected all rings",
            "NCCL INFO comm 0x7f{hx} rank {r} nranks {w} cudaDev {l} busId {bus}000 commId 0x{hx2} - Init COMPLETE",
            "NCCL INFO Using network IB",
            "NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.",
            "NCCL INFO Setting affinity for GPU {l} to ffff,ffffffff",
            "NCCL INFO ncclCommInitRank comm 0x7f{hx} rank {r} nranks {w} cudaDev {l} nvmlDev {l} busId {bus}000 commId 0x{hx2} - Init START",
            "NCCL INFO Channel {ch:02d}/1 : {r}[{l}] -> {r2}[{l2}] [send] via NET/IB/{l}/GDRDMA",
        ]
        for _ in range(n):
            r = self.rng.randrange(self.world)
            m = self.rng.choice(msgs).format(
                a=self.rng.randint(0, 9), b=self.rng.randint(0, 255), c=self.rng.randint(1, 254),
                ch=self.rng.randint(0, 31), r=r, l=r % self.per_node, r2=(r + 1) % self.world,
                l2=(r + 1) % self.per_node, hx=f"{self.rng.getrandbits(36):09x}", hx2=f"{self.rng.getrandbits(60):015x}",
                w=self.world, bus=self.rng.choice(["1b", "3b", "5d", "9a", "ba", "db"]))
            self.add(f"{self.nccl_prefix(r)} {m}", r)
        self.add(f"{self.nccl_prefix(0)} NCCL INFO NCCL version {self.nccl}+cuda12.{self.rng.randint(1, 4)}", 0)

    def lookalikes(self, k: int) -> None:
        r = self.rng.randrange(self.world)
        pool = [
            lambda: self.add(f"{self.nccl_prefix(r)} NCCL WARN NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory", r),
            lambda: self.add(f"{self.nccl_prefix(r)} NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.", r),
            lambda: self.add(f"{self.nccl_prefix(r)} NCCL INFO P2P is disabled between connected GPUs {r % self.per_node} and {(r + 1) % self.per_node}", r),
            lambda: self.add("/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:558: UserWarning: This DataLoader will create 16 worker processes in total. Our suggested max number of worker in current system is 8, which is smaller than what this DataLoader is going to create.", r),
            lambda: self.add("/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py:2804: FutureWarning: `torch.distributed._all_gather_base` is a private function and will be deprecated. Please use `torch.distributed.all_gather_into_tensor` instead.", r),
            lambda: self.add("  warnings.warn(", r),
            lambda: self.add(f"{self.glog('W', 'ProcessGroupNCCL.cpp', r)} Warning: Environment variable NCCL_ASYNC_ERROR_HANDLING is deprecated; use TORCH_NCCL_ASYNC_ERROR_HANDLING instead (function getCvarInt)", r),
            lambda: self.add(f"[{self.stamp()},{self.rng.randint(100, 999)}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank {r} Skipping step. Attempted loss scale: {2 ** self.rng.randint(12, 17)}, reducing to {2 ** self.rng.randint(8, 11)}", r),
            lambda: self.add(f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to {2 ** self.rng.randint(8, 16)}.0", r),
            lambda: self.add("huggingface/tokenizers: The current process just got forked, after parallelism has already been used. Disabling parallelism to avoid deadlocks...", r),
            lambda: self.add("To disable this warning, you can either:", r),
            lambda: self.add("\t- Explicitly set the environment variable TOKENIZERS_PARALLELISM=(true | false)", r),
            lambda: self.add(f"{self.glog('W', 'socket.cpp', r)} [c10d] The client socket has failed to connect to [{self.hosts[0]}]:29500 (errno: 111 - Connection refused).", r),
            lambda: self.add("WARNING:torch.distributed.run:*****************************************\nSetting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed.", r),
            lambda: self.add(f"  timeout: {self.rng.choice([600, 1800, 3600])}   nccl_timeout_minutes: 30   save_interval: 1000   retries_on_error: 3", r),
            lambda: self.add(f"validation | iteration {self.iteration} | lm loss value: 2.1E+00 | val_error_rate: 0.{self.rng.randint(10, 99)} | ppl: 8.2", r),
            lambda: self.add(f"MeanAbsoluteError: 0.{self.rng.randint(100, 999)}", r),
            lambda: self.add(f"[{self.stamp()}] saving checkpoint at iteration {self.iteration} to /lustre/ckpt/run{self.job_id}", r),
            lambda: self.add(f"  successfully saved checkpoint from iteration {self.iteration} to /lustre/ckpt/run{self.job_id} [ t 1/1, p 1/1 ]", r),
            lambda: self.add(f"{self.nccl_prefix(r)} NCCL WARN NVLS multicast support is not available on dev {r % self.per_node}", r),
            lambda: self.add(f"{self.glog('W', 'CUDAAllocatorConfig.h', r)} Warning: expandable_segments not supported on this platform (function operator())", r),
            lambda: self.add("wandb: WARNING Serializing object of type dict that is 1204 bytes", r),
            lambda: self.add("wandb: Network error (ReadTimeout), entering retry loop.", r),
            lambda: self.add(f"Rank {r}: skipping step {self.iteration} due to overflow, skipping this step (loss scale reduced to 8192)", r),
            lambda: self.add("torch/nn/modules/module.py:1501: UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). (Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.)", r),
        ]
        for f in self.rng.sample(pool, k=min(k, len(pool))):
            f()

    def exit_advisory(self) -> None:
        for r in self.rng.sample(range(self.world), k=min(3, self.world)):
            self.add(f"{self.glog('W', 'ProcessGroupNCCL.cpp', r)} Warning: WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL. On normal program exit, the application should call destroy_process_group to ensure that any pending NCCL operations have finished in this process. In rare cases this process can exit before this point and block the progress of another member of the process group. (function operator())", r)

    def opening(self) -> None:
        self.add(f"+ srun --label --ntasks-per-node={self.per_node} python pretrain.py --tensor-model-parallel-size 2", 0)
        self.nccl_chatter(self.rng.randint(4, 14))
        self.lookalikes(self.rng.randint(1, 4))
        self.progress(self.rng.randint(3, 12))

    # -------------------------------------------------------------- common failure blocks
    def traceback(self, rank: int, frames: list[str], last: str) -> None:
        self.add("Traceback (most recent call last):", rank)
        for fr in frames:
            self.add(f'  File "{fr}", line {self.rng.randint(10, 900)}, in {self.rng.choice(["forward", "train_step", "<module>", "main", "__call__", "_call_impl", "backward"])}', rank)
            self.add(f"    {self.rng.choice(['loss = model(batch)', 'out = self.layers(x)', 'return forward_call(*args, **kwargs)', 'optimizer.step()', 'torch.distributed.all_reduce(t)'])}", rank)
        self.add(last, rank)

    def watchdog(self, rank: int, seq: int, op: str, timeout_ms: int) -> None:
        ran = timeout_ms + self.rng.randint(5, 900)
        if self.torch < "2.1":
            body = f"WorkNCCL(SeqNum={seq}, OpType={op}, Timeout(ms)={timeout_ms})"
        else:
            n = self.rng.randint(1, 10**8)
            body = f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, Timeout(ms)={timeout_ms})"
        self.add(f"{self.glog('E', 'ProcessGroupNCCL.cpp', rank)} [Rank {rank}] Watchdog caught collective operation timeout: {body} ran for {ran} milliseconds before timing out.", rank)
        if self.torch >= "2.3":
            self.add(f"{self.glog('E', 'ProcessGroupNCCL.cpp', rank)} [PG 0 (default_pg) Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq + self.rng.randint(0, 3)}, last completed NCCL work: {seq - 1}.", rank)

    def nccl_abort_fallout(self, ranks: list[int]) -> None:
        for r in ranks:
            self.add(f"{self.glog('E', 'ProcessGroupNCCL.cpp', r)} [Rank {r}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.", r)
            self.add(f"{self.glog('E', 'ProcessGroupNCCL.cpp', r)} [Rank {r}] To avoid data inconsistency, we are taking the entire process down.", r)

    def elastic_summary(self, rank: int, exitcode: int, *, signal: str | None = None) -> None:
        host = self.host_of(rank)
        tb = f"Signal {-exitcode} ({signal}) received by PID {self.rng.randint(1000, 90000)}" if signal else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        block = [
            "Traceback (most recent call last):",
            '  File "/usr/local/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================",
            "pretrain.py FAILED",
            "------------------------------------------------------------",
            "Failures:",
            "  <NO_OTHER_FAILURES>",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            f"  time      : 2024-05-{self.rng.randint(1, 28):02d}_{self.ts_h:02d}:{self.ts_m:02d}:{self.rng.randint(10, 59)}",
            f"  host      : {host}",
            f"  rank      : {rank} (local_rank: {rank % self.per_node})",
            f"  exitcode  : {exitcode} (pid: {self.rng.randint(1000, 90000)})",
            "  error_file: <N/A>",
            f"  traceback : {tb}",
            "============================================================",
        ]
        first = self.hosts.index(host) * self.per_node if self.prefix_style == "srun" else 0
        for line in block:
            self.add(line, first)

    def srun_exit(self, rank: int, code: int) -> None:
        self.lines.append(f"srun: error: {self.host_of(rank)}: task {rank}: Exited with exit code {code}")

    def step_abort(self) -> None:
        self.lines.append("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")

    def write(self, name: str, expected: dict) -> None:
        write_case(OUT, name, self.lines, {**self.sidecar, **expected})


# ============================================================================ scenarios


def benign(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    for _ in range(rng.randint(2, 5)):
        c.progress(rng.randint(2, 10))
        c.lookalikes(rng.randint(1, 5))
    if rng.random() < 0.5:
        c.exit_advisory()
    if rng.random() < 0.3:
        c.sidecar["job"] = {"state": "COMPLETED", "exit_code": 0}
    if rng.random() < 0.2:
        c.add(f"Mar  3 02:11:{rng.randint(10, 59)} {c.hosts[0]} kernel: NVRM: Xid (PCI:0000:{rng.choice(['1b', '3b', '5d'])}:00): 63, pid=1224, Row Remapper: New row (0x{rng.getrandbits(28):08x}) marked for remapping, reset gpu to activate.")
    if rng.random() < 0.2:
        c.add("slurmstepd: error: Exceeded step memory limit at some point.")
    c.add(rng.choice(["Training completed. Do not forget to share your model on huggingface.co/models =)",
                      "`Trainer.fit` stopped: `max_steps=20000` reached.", "[after training is done] datetime: 2024-05-03 11:02:33",
                      f"step {c.iteration} done, exiting cleanly", "Finished training; final checkpoint written."]))
    c.write(f"none_{i:02d}", exp("none", "unknown"))


def nccl_timeout(rng: random.Random, i: int) -> None:
    c = Case(rng, nodes=rng.choice([2, 4]), per_node=rng.choice([4, 8]))
    c.opening()
    seq, op, tmo = rng.randint(1000, 900000), rng.choice(OPS), rng.choice([600000, 1800000])
    kind = i % 5
    suspect_hosts: list[str] = []
    if kind == 0:  # one silent rank
        silent = rng.randrange(c.world)
        for r in rng.sample([x for x in range(c.world) if x != silent], c.world - 1):
            c.watchdog(r, seq, op, tmo)
        suspect_hosts = [c.host_of(silent)]
    elif kind == 1:  # everybody times out the same
        for r in range(c.world):
            c.watchdog(r, seq, op, tmo)
    elif kind == 2:  # one rank behind
        behind = rng.randrange(c.world)
        for r in range(c.world):
            c.watchdog(r, seq - 1 if r == behind else seq, op, tmo)
        suspect_hosts = [c.host_of(behind)]
    elif kind == 3:  # monitored barrier names the straggler
        bad = rng.randrange(1, c.world)
        c.add(f"RuntimeError: Rank {bad} failed to pass monitoredBarrier in {tmo} ms", 0)
        for r in range(0, c.world, 2):
            c.watchdog(r, seq, op, tmo)
        suspect_hosts = [c.host_of(bad)]
    else:  # only rank 0's output is in the log
        c.watchdog(0, seq, op, tmo)
    c.nccl_abort_fallout(rng.sample(range(c.world), k=min(3, c.world)))
    c.elastic_summary(rng.randrange(c.world), -6, signal="SIGABRT")
    c.step_abort()
    c.write(f"nccl_timeout_{i:02d}", exp("nccl_timeout", "unknown", suspect_hosts))


def nccl_error(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    kind = i % 5
    ranks = rng.sample(range(c.world), k=min(c.world, rng.randint(2, 6)))
    for r in ranks:
        if kind == 0:
            c.add(f"{c.nccl_prefix(r)} NCCL WARN socketProgressOpt: Call to recv from 10.{rng.randint(0, 9)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}<{rng.randint(30000, 60000)}> failed : Software caused connection abort", r)
            last = f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:{rng.randint(1000, 2000)}, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version {c.nccl}"
        elif kind == 1:
            last = f"RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:{rng.randint(100, 400)}, internal error - please report this issue to the NCCL developers, NCCL version {c.nccl}"
        elif kind == 2:
            last = f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:{rng.randint(1000, 2000)}, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version {c.nccl}"
        elif kind == 3:
            c.add(f"{c.nccl_prefix(r)} NCCL WARN Bootstrap : no socket interface found", r)
            last = f"RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:{rng.randint(1000, 2000)}, unhandled system error, NCCL version {c.nccl}"
        else:
            c.add(f"{c.nccl_prefix(r)} NCCL WARN [Proxy Service {r}] Failed to execute operation Connect from rank {r}, retcode 3", r)
            last = f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:{rng.randint(1000, 2000)}, internal error, NCCL version {c.nccl}"
        c.traceback(r, ["/workspace/megatron/core/distributed/param_and_grad_buffer.py"], last)
        if kind in (0, 3):
            c.add("ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ", r)
        elif kind == 1 or kind == 4:
            c.add("ncclInternalError: Internal check failed.", r)
    c.elastic_summary(ranks[0], 1)
    c.srun_exit(ranks[0], 1)
    c.write(f"nccl_error_{i:02d}", exp("nccl_error", "system_software"))


def cuda_error(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    bad = rng.randrange(c.world)
    kind = i % 7
    hosts: list[str] = []
    domain = "application"
    if kind == 0:
        last = "RuntimeError: CUDA error: an illegal memory access was encountered"
    elif kind == 1:
        c.add(f"../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{rng.randint(0, 900)},0,0], thread: [{rng.randint(0, 127)},0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.", bad)
        last = "RuntimeError: CUDA error: device-side assert triggered"
    elif kind == 2:
        last = "RuntimeError: CUDA error: misaligned address"
    elif kind == 3:
        c.add(f"[{rng.randint(1000, 90000)}.{rng.randint(100000, 999999)}] NVRM: Xid (PCI:0000:{rng.choice(['1b', '3b'])}:00): 13, pid={rng.randint(1000, 90000)}, name=python, Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address", bad)
        last = "RuntimeError: CUDA error: unspecified launch failure"
        hosts, domain = [c.host_of(bad)], "unknown"
    elif kind == 4:
        last = "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`"
    elif kind == 5:
        last = "RuntimeError: CUDA error: an illegal instruction was encountered"
    else:
        last = "RuntimeError: CUDA error: unknown error"
        hosts, domain = [c.host_of(bad)], "unknown"
    c.traceback(bad, ["/workspace/model/attention.py", "/opt/venv/lib/python3.10/site-packages/torch/nn/modules/module.py"], last)
    c.add("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.", bad)
    c.add("For debugging consider passing CUDA_LAUNCH_BLOCKING=1.", bad)
    others = [r for r in range(c.world) if r != bad][:3]
    for r in others:
        c.watchdog(r, rng.randint(100, 9000), "ALLREDUCE", 600000)
    c.elastic_summary(bad, 1)
    c.srun_exit(bad, 1)
    c.write(f"cuda_error_{i:02d}", exp("cuda_error", domain, hosts))


def gpu_oom(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    bad = rng.randrange(c.world)
    kind = i % 7
    g = bad % c.per_node
    if kind == 0:
        c.traceback(bad, ["/workspace/train.py"], f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {rng.uniform(0.1, 9):.2f} GiB. GPU {g} has a total capacity of 79.15 GiB of which {rng.uniform(0.01, 1):.2f} GiB is free. Including non-PyTorch memory, this process has 78.{rng.randint(0, 9)} GiB memory in use. Of the allocated memory 71.3 GiB is allocated by PyTorch, and 5.9 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
    elif kind == 1:
        c.traceback(bad, ["/workspace/train.py"], f"RuntimeError: CUDA out of memory. Tried to allocate {rng.randint(20, 900)}.00 MiB (GPU {g}; 39.59 GiB total capacity; 37.12 GiB already allocated; {rng.randint(2, 90)}.19 MiB free; 38.01 GiB reserved in total by PyTorch)")
    elif kind == 2:
        c.add(f"{c.nccl_prefix(bad)} NCCL WARN Cuda failure 'out of memory'", bad)
        c.add(f"{c.nccl_prefix(bad)} NCCL INFO include/alloc.h:{rng.randint(40, 200)} -> 1", bad)
        c.traceback(bad, ["/workspace/train.py"], f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version {c.nccl}")
    elif kind == 3:
        c.traceback(bad, ["/workspace/train.py"], f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.{rng.randint(10, 99)} GiB (GPU {g}; 79.35 GiB total capacity; 75.00 GiB already allocated)")
        for r in range(min(c.world, 4)):
            if r != bad:
                c.watchdog(r, rng.randint(100, 9999), "ALLREDUCE", 1800000)
    elif kind == 4:
        c.traceback(bad, ["/workspace/train.py"], "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    elif kind == 5:
        c.add(f"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate {rng.randint(1, 9) * 1073741824} bytes.", bad)
    else:
        c.traceback(bad, ["/workspace/train.py"], "RuntimeError: CUDA error: out of memory")
    c.elastic_summary(bad, 1)
    c.write(f"gpu_oom_{i:02d}", exp("gpu_oom", "resource"))


def gpu_hardware(rng: random.Random, i: int) -> None:
    c = Case(rng, nodes=rng.choice([2, 4, 8]))
    c.opening()
    bad_host = rng.choice(c.hosts)
    pci = f"0000:{rng.choice(['18', '3b', '5e', '86', 'af', 'd8'])}:00"
    kind = i % 10
    syslog = f"{rng.choice(['Jan', 'Feb', 'Mar', 'Apr'])} {rng.randint(1, 28):2d} {c.ts_h:02d}:{c.ts_m:02d}:{rng.randint(10, 59)} {bad_host} kernel: "
    expected_domain = "hardware"
    if kind == 0:
        c.lines.append(syslog + f"NVRM: Xid (PCI:{pci}): 79, pid={rng.randint(1000, 90000)}, name=python3, GPU has fallen off the bus.")
        c.lines.append(syslog + f"NVRM: GPU at PCI:{pci}: GPU-{rng.getrandbits(32):08x}-1c2d-4e5f-8a9b-{rng.getrandbits(48):012x}")
        seq = rng.randint(1000, 99999)
        for r in range(c.world):
            if c.host_of(r) != bad_host:
                c.watchdog(r, seq, "ALLREDUCE", 600000)
    elif kind == 1:
        c.lines.append(syslog + f"NVRM: Xid (PCI:{pci}): 48, pid={rng.randint(1000, 90000)}, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.")
        r = c.hosts.index(bad_host) * c.per_node
        c.traceback(r, ["/workspace/train.py"], "RuntimeError: CUDA error: uncorrectable ECC error encountered")
    elif kind == 2:
        c.lines.append(f"{bad_host}: Unable to determine the device handle for GPU{pci}.0: GPU is lost.  Reboot the system to recover this GPU")
        c.lines.append("srun: error: prolog failed")
    elif kind == 3:
        c.lines.append(syslog + f"NVRM: Xid (PCI:{pci}): 95, pid='<unknown>', name=<unknown>, Uncontained: FBHUB. RST: Yes, D-RST: No")
        for r in range(min(4, c.world)):
            c.add(f"{c.nccl_prefix(r)} NCCL WARN NET/IB : Got completion from peer 10.3.{rng.randint(0, 9)}.{rng.randint(1, 250)}<{rng.randint(30000, 60000)}> with error 5, opcode 32603, len 0, vendor err 249 (Recv) localGid ::ffff:10.3.0.8 remoteGids::ffff:10.3.0.9", r) if False else None
    elif kind == 4:
        c.lines.append(syslog + f"NVRM: Xid (PCI:{pci}): 119, pid={rng.randint(1000, 90000)}, name=python, Timeout after 6s of waiting for RPC response from GPU{rng.randint(0, 7)} GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).")
        c.traceback(0, ["/workspace/train.py"], "RuntimeError: CUDA error: unspecified launch failure")
    elif kind == 5:
        c.lines.append(syslog + f"NVRM: Xid (PCI:{pci}): 64, pid={rng.randint(1000, 90000)}, name=python, Row Remapper: Failed to remap row (0x{rng.getrandbits(24):06x}) to spare row.")
    elif kind == 6:
        c.lines.append(syslog + f"NVRM: Xid (PCI:{pci}): 13, pid={rng.randint(1000, 90000)}, name=python, Graphics Exception: ESR 0x50{rng.randint(1000, 9999)}=0x{rng.getrandbits(24):x}")
        c.lines.append(syslog + f"NVRM: Xid (PCI:{pci}): 31, pid={rng.randint(1000, 90000)}, name=python, Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_{rng.getrandbits(32):08x}. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")
        c.lines.append(syslog + f"NVRM: Xid (PCI:{pci}): 79, pid={rng.randint(1000, 90000)}, name=python, GPU has fallen off the bus.")
    elif kind == 7:
        c.sidecar["nodes"] = [{"name": h, "state": "ALLOCATED"} for h in c.hosts if h != bad_host] + [
            {"name": bad_host, "state": "MIXED", "flags": ["DRAIN"], "reason": "gpu health check: xid 79 fallen off bus", "reason_user": "root"}]
        c.sidecar["job"] = {"state": "FAILED", "exit_code": 1}
        for r in range(c.world):
            if c.host_of(r) != bad_host:
                c.watchdog(r, 4242, "ALLREDUCE", 600000)
    elif kind == 8:
        g = rng.randint(0, 7)
        c.sidecar["metric_facts"] = [{"source": "metrics", "line": f"{bad_host} GPU {g} (00000000:{rng.choice(['18', '3B', 'AF'])}:00.0): {rng.choice(['Xid 48 reported by DCGM', '2 double-bit (uncorrectable) ECC error(s) in the window', 'row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE)'])}", "host": bad_host, "pattern_id": "metrics.xid"}]
        c.sidecar["job"] = {"state": "FAILED", "exit_code": 1}
        c.traceback(0, ["/workspace/train.py"], f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version {c.nccl}")
    else:
        c.lines.append(syslog + f"NVRM: Xid (PCI:{pci}): 140, pid={rng.randint(1000, 90000)}, name=python, An Uncorrectable ECC error was detected in GPU memory; ECC errors were not contained.")
        c.traceback(0, ["/workspace/train.py"], "RuntimeError: CUDA error: unknown error")
    c.elastic_summary(0, 1)
    c.write(f"gpu_hardware_{i:02d}", exp("gpu_hardware", expected_domain, [bad_host]))


def interconnect(rng: random.Random, i: int) -> None:
    c = Case(rng, nodes=rng.choice([2, 4, 8]))
    c.opening()
    bad = rng.randrange(c.world)
    bad_host = c.host_of(bad)
    kind = i % 7
    hosts = [bad_host]
    domain = "network"
    if kind == 0:
        c.add(f"{c.nccl_prefix(bad)} NCCL WARN NET/IB : Got completion from peer 10.{rng.randint(0, 9)}.{rng.randint(0, 255)}.{rng.randint(1, 250)}<{rng.randint(30000, 60000)}> with error 12, opcode {rng.choice([0, 1, 129])}, len 0, vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGidsfe80::ba59:9f03:c4:{rng.randint(1000, 9999)}", bad)
        c.add(f"{c.nccl_prefix(bad)} NCCL INFO transport/net.cc:{rng.randint(900, 1400)} -> 6", bad)
        c.traceback(bad, ["/workspace/train.py"], f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version {c.nccl}")
    elif kind == 1:
        c.add(f"[{rng.randint(1600000000, 1800000000)}.{rng.randint(100000, 999999)}] [{bad_host}:{rng.randint(1000, 90000)}:0]        ib_iface.c:{rng.randint(700, 1000)} UCX  ERROR ibv_poll_cq() returned error: transport retry counter exceeded", bad)
        c.add(f"[{bad_host}:{rng.randint(1000, 90000)}] *** An error occurred in MPI_Allreduce", bad)
    elif kind == 2:
        c.lines.append(f"{rng.choice(['May', 'Jun'])} {rng.randint(1, 28):2d} 03:{rng.randint(10, 59)}:11 {bad_host} kernel: mlx5_core 0000:{rng.choice(['0c', '4b', '8d'])}:00.0 ib{rng.randint(0, 3)}: Link down")
        for r in range(min(4, c.world)):
            c.traceback(r, ["/workspace/train.py"], f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error, NCCL version {c.nccl}")
    elif kind == 3:
        c.lines.append(f"{bad_host}: [{rng.randint(1000, 9000)}.{rng.randint(100000, 999999)}] NVRM: Xid (PCI:0000:{rng.choice(['18', '3b'])}:00): 74, pid={rng.randint(1000, 90000)}, name=python, NVLink: fatal error detected on link {rng.randint(0, 17)}(0x{rng.getrandbits(16):x}, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)")
        domain = "hardware"
        for r in range(min(3, c.world)):
            c.watchdog(r, 777, "ALLGATHER", 600000)
    elif kind == 4:
        c.add(f"{c.nccl_prefix(bad)} NCCL WARN NET/IB : mlx5_{rng.randint(0, 7)}:1 Got async event : port error", bad)
        c.traceback(bad, ["/workspace/train.py"], "RuntimeError: NCCL communicator was aborted on rank 0.")
    elif kind == 5:
        c.add(f"{c.nccl_prefix(bad)} NCCL WARN Call to ibv_modify_qp failed with error Connection timed out", bad)
        c.add(f"{c.nccl_prefix(bad)} NCCL WARN NET/IB : Got completion from peer 10.1.1.{rng.randint(1, 250)}<{rng.randint(30000, 60000)}> with error 12, opcode 0, len 0, vendor err 129 (Send) localGid ::ffff:10.1.1.2", bad)
    else:
        c.lines.append(f"{bad_host}: nvidia-nvswitch{rng.randint(0, 3)}: SXid (PCI:0000:{rng.choice(['85', '86', 'c5'])}:00.0): 24007, Fatal, Link {rng.randint(0, 63)} sourcetrack timeout error (First)")
        domain = "hardware"
    c.elastic_summary(bad, 1)
    c.write(f"interconnect_{i:02d}", exp("interconnect", domain, hosts))


def hang(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    kind = i % 5
    hosts: list[str] = []
    if kind == 0:
        c.progress(rng.randint(5, 20))
        c.sidecar["hang_suspected"] = True
        c.sidecar["job"] = {"state": "RUNNING"}
    elif kind == 1:
        for r in rng.sample(range(c.world), k=min(3, c.world)):
            c.add(f"{c.glog('E', 'ProcessGroupNCCL.cpp', r)} [PG 0 Rank {r}] ProcessGroupNCCL's watchdog got stuck for {rng.choice([480, 600])} seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA api (for example, CudaEventDestroy), or other deadlock-prone behaviors.", r)
    elif kind == 2:
        straggler = rng.choice(c.hosts)
        hosts = [straggler]
        c.sidecar["hang_suspected"] = True
        c.sidecar["straggler_hosts"] = [straggler]
        c.sidecar["job"] = {"state": "RUNNING"}
    elif kind == 3:
        c.progress(3)
        c.sidecar["hang_suspected"] = True
        c.sidecar["job"] = {"state": "TIMEOUT"}
        c.lines.append(f"slurmstepd: error: *** JOB {c.job_id} ON {c.hosts[0]} CANCELLED AT 2024-05-{rng.randint(10, 28)}T{c.ts_h:02d}:{c.ts_m:02d}:01 DUE TO TIME LIMIT ***")
    else:
        r = rng.randrange(c.world)
        c.add(f"{c.glog('E', 'ProcessGroupNCCL.cpp', r)} [PG 0 (default_pg) Rank {r}] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()={rng.randint(1, 5)}", r)
    c.write(f"hang_{i:02d}", exp("hang", "unknown", hosts))


def node_failure(rng: random.Random, i: int) -> None:
    c = Case(rng, nodes=rng.choice([2, 4, 8]))
    c.opening()
    bad_host = rng.choice(c.hosts)
    kind = i % 6
    hosts = [bad_host]
    if kind == 0:
        c.lines.append(f"srun: error: Node failure on {bad_host}")
        c.lines.append(f"slurmstepd: error: *** JOB {c.job_id} ON {c.hosts[0]} CANCELLED AT 2024-05-{rng.randint(10, 28)}T0{rng.randint(0, 9)}:{rng.randint(10, 59)}:{rng.randint(10, 59)} DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")
        for r in range(min(3, c.world)):
            c.watchdog(r, 99, "ALLREDUCE", 600000)
    elif kind == 1:
        c.sidecar["job"] = {"state": "NODE_FAIL", "reason": "NodeFail"}
        c.sidecar["nodes"] = [{"name": h, "state": "ALLOCATED"} for h in c.hosts if h != bad_host] + [{"name": bad_host, "state": "DOWN", "reason": "Not responding"}]
        for r in range(min(4, c.world)):
            c.traceback(r, ["/workspace/train.py"], "torch.distributed.DistNetworkError: Connection reset by peer")
    elif kind == 2:
        c.add("Received SIGTERM: job was preempted or cancelled, saving emergency checkpoint", 0)
        c.lines.append(f"srun: error: Node failure on {bad_host}")
        c.lines.append(f"slurmstepd: error: *** STEP {c.job_id}.0 ON {c.hosts[0]} CANCELLED AT 2024-06-0{rng.randint(1, 9)}T1{rng.randint(0, 9)}:{rng.randint(10, 59)}:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")
    elif kind == 3:
        c.lines.append(f"{bad_host}: [{rng.randint(10000, 99999)}.{rng.randint(100000, 999999)}] Kernel panic - not syncing: Fatal exception in interrupt")
        c.sidecar["job"] = {"state": "FAILED", "exit_code": 1}
    elif kind == 4:
        c.lines.append(f"srun: error: Task launch for StepId={c.job_id}.0 failed on node {bad_host}: Communication connection failure")
        c.lines.append("srun: error: Application launch failed: Communication connection failure")
    else:
        c.sidecar["nodes"] = [{"name": bad_host, "state": "IDLE", "flags": ["NOT_RESPONDING"], "reason": ""}]
        c.sidecar["job"] = {"state": "FAILED", "exit_code": 1}
        for r in range(c.world):
            if c.host_of(r) != bad_host:
                c.watchdog(r, 5050, "ALLREDUCE", 600000)
    c.write(f"node_failure_{i:02d}", exp("node_failure", "node", hosts))


def time_limit(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    c.progress(rng.randint(4, 10))
    kind = i % 5
    when = f"2024-05-{rng.randint(10, 28)}T{c.ts_h:02d}:{c.ts_m:02d}:{rng.randint(10, 59)}"
    if kind in (0, 3):
        c.lines.append(f"slurmstepd: error: *** JOB {c.job_id} ON {c.hosts[0]} CANCELLED AT {when} DUE TO TIME LIMIT ***")
        c.add(f"[{c.stamp()}] torch.distributed.elastic.agent.server.api: [WARNING] Received Signals.SIGTERM death signal, shutting down workers", 0)
        c.add("torch.distributed.elastic.multiprocessing.api.SignalException: Process 4131 got signal: 15", 0)
        if kind == 3:
            for r in range(min(3, c.world)):
                c.traceback(r, ["/workspace/train.py"], f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version {c.nccl}")
    elif kind == 1:
        c.sidecar["job"] = {"state": "TIMEOUT", "reason": "TimeLimit"}
        c.step_abort()
        c.lines.append(f"srun: error: {c.hosts[0]}: tasks 0-{c.per_node - 1}: Terminated")
        c.add("KeyboardInterrupt", 0)
    elif kind == 2:
        c.lines.append(f"slurmstepd: error: *** STEP {c.job_id}.0 ON {c.hosts[-1]} CANCELLED AT {when} DUE TO TIME LIMIT ***")
        c.step_abort()
    else:
        c.sidecar["job"] = {"state": "TIMEOUT"}
        for r in range(min(2, c.world)):
            c.watchdog(r, 12345, "ALLREDUCE", 600000)
    c.write(f"time_limit_{i:02d}", exp("time_limit", "scheduler"))


def preempted(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    kind = i % 5
    when = f"2024-07-{rng.randint(10, 28)}T{c.ts_h:02d}:{c.ts_m:02d}:{rng.randint(10, 59)}"
    if kind == 0:
        c.lines.append(f"slurmstepd: error: *** JOB {c.job_id} ON {c.hosts[0]} CANCELLED AT {when} DUE TO PREEMPTION ***")
    elif kind == 1:
        c.sidecar["job"] = {"state": "PREEMPTED"}
        c.add("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", 0)
        c.add(f"[E] node {c.hosts[-1]} died, rendezvous closed", 0)
    elif kind == 2:
        c.lines.append(f"slurmstepd: error: *** JOB {c.job_id} ON {c.hosts[0]} CANCELLED AT {when} DUE TO JOB REQUEUE ***")
    elif kind == 3:
        c.sidecar["job"] = {"state": "PREEMPTED", "reason": "Preempted"}
        c.add("Signal SIGUSR1 received: preemption notice, saving checkpoint and exiting", 0)
    else:
        c.lines.append(f"slurmstepd: error: *** STEP {c.job_id}.0 ON {c.hosts[0]} CANCELLED AT {when} DUE TO PREEMPTION ***")
        for r in range(min(3, c.world)):
            c.traceback(r, ["/workspace/train.py"], f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error, NCCL version {c.nccl}")
    c.write(f"preempted_{i:02d}", exp("preempted", "scheduler"))


APP_ERRORS = [
    ("KeyError: 'attention_mask'", ["/workspace/data/collate.py"]),
    ("ValueError: Expected input batch_size (16) to match target batch_size (32).", ["/workspace/train.py"]),
    ("AttributeError: 'NoneType' object has no attribute 'shape'", ["/workspace/model/layers.py"]),
    ("ModuleNotFoundError: No module named 'flash_attn'", ["/workspace/pretrain.py"]),
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:3 and cpu!", ["/workspace/model/embed.py"]),
    ("AssertionError: sequence length 8193 exceeds max_position_embeddings 8192", ["/workspace/model/rope.py"]),
    ("TypeError: forward() got an unexpected keyword argument 'use_cache'", ["/workspace/model/gpt.py"]),
    ("IndexError: list index out of range", ["/workspace/data/sampler.py"]),
]


def app_error(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    bad = rng.randrange(c.world)
    kind = i % 10
    if kind < 5:
        last, frames = APP_ERRORS[(i + rng.randrange(3)) % len(APP_ERRORS)]
        c.traceback(bad, frames, last)
        for r in [x for x in range(c.world) if x != bad][:rng.randint(0, 4)]:
            c.watchdog(r, rng.randint(100, 9999), "ALLREDUCE", 600000)
    elif kind == 5:
        c.add(f"{c.nccl_prefix(bad)} NCCL WARN Duplicate GPU detected : rank {bad} and rank {(bad + 1) % c.world} both on CUDA device {rng.choice(['1b000', '3b000', '5d000'])}", bad)
        c.traceback(bad, ["/workspace/train.py"], f"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version {c.nccl}")
    elif kind == 6:
        c.traceback(bad, ["/workspace/train.py"], "ValueError: shard 0031 has 0 samples")
        c.add("", bad)
        c.add("During handling of the above exception, another exception occurred:", bad)
        c.add("", bad)
        c.traceback(bad, ["/workspace/train.py"], "RuntimeError: could not build dataset index for split 'train'")
    elif kind == 7:
        c.add("Fault tolerance: configuration invalid, exiting with code 93 (do not restart)", bad)
        c.srun_exit(bad, 93)
    elif kind == 8:
        c.add(f"[{c.stamp()}] ERROR: Loss is NaN at iteration {c.iteration}, stopping training", bad)
    else:
        c.add(f"{c.glog('W', 'socket.cpp', 0)} [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).", 0)
        c.add(f"{c.glog('E', 'socket.cpp', 0)} [c10d] The server socket has failed to listen on any local network address.", 0)
        c.traceback(0, ["/usr/local/bin/torchrun"], "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).")
    c.elastic_summary(bad, 93 if kind == 7 else 1)
    c.write(f"app_error_{i:02d}", exp("app_error", "application"))


def data_io(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    bad = rng.randrange(c.world)
    kind = i % 7
    if kind == 0:
        c.traceback(bad, ["/workspace/megatron/checkpointing.py", "/opt/venv/lib/python3.10/site-packages/torch/serialization.py"], "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 2176709568 vs 2176709456")
        c.add(f"OSError: [Errno 28] No space left on device: '/scratch/ckpt/iter_{c.iteration:07d}/mp_rank_00/model_optim_rng.pt'", bad)
        out = exp("data_io", "resource")
    elif kind == 1:
        c.traceback(bad, ["/workspace/data/indexed_dataset.py"], f"OSError: [Errno 116] Stale file handle: '/nfs/datasets/pile/shard_{rng.randint(0, 999):05d}.bin'")
        out = exp("data_io", "system_software")  # a shared file system is no node's fault
    elif kind == 2:
        c.traceback(bad, ["/workspace/train.py", "/opt/venv/lib/python3.10/site-packages/torch/serialization.py"], "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory")
        out = exp("data_io", "application")
    elif kind == 3:
        c.traceback(bad, ["/workspace/data/loader.py"], f"OSError: [Errno 5] Input/output error: '/lustre/data/tok/part-{rng.randint(0, 9999):05d}.arrow'")
        out = exp("data_io", "system_software")  # a shared file system is no node's fault
    elif kind == 4:
        c.traceback(bad, ["/workspace/data/loader.py"], f"FileNotFoundError: [Errno 2] No such file or directory: '/datasets/c4/en/c4-train.{rng.randint(0, 1023):05d}-of-01024.json.gz'")
        out = exp("data_io", "application")
    elif kind == 5:
        c.traceback(bad, ["/workspace/megatron/checkpointing.py"], "OSError: [Errno 122] Disk quota exceeded")
        out = exp("data_io", "resource")
    else:
        c.traceback(bad, ["/workspace/data/loader.py"], "OSError: [Errno 107] Transport endpoint is not connected: '/mnt/gcs/bucket/train'")
        out = exp("data_io", "system_software")  # a shared file system is no node's fault
    for r in [x for x in range(c.world) if x != bad][:2]:
        c.watchdog(r, 31337, "ALLREDUCE", 1800000)
    c.elastic_summary(bad, 1)
    c.write(f"data_io_{i:02d}", out)


def host_oom(rng: random.Random, i: int) -> None:
    c = Case(rng)
    c.opening()
    bad = rng.randrange(c.world)
    host = c.host_of(bad)
    kind = i % 7
    if kind == 0:
        c.lines.append(f"slurmstepd: error: Detected 1 oom_kill event in StepId={c.job_id}.0. Some of the step tasks have been OOM Killed.")
        c.lines.append(f"srun: error: {host}: task {bad}: Out Of Memory")
    elif kind == 1:
        c.traceback(bad, ["/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py"], f"RuntimeError: DataLoader worker (pid {rng.randint(1000, 90000)}) is killed by signal: Killed. ")
    elif kind == 2:
        c.lines.append(f"{host}: [{rng.randint(10000, 99999)}.{rng.randint(100000, 999999)}] Out of memory: Killed process {rng.randint(1000, 90000)} (python) total-vm:{rng.randint(10**8, 9 * 10**8)}kB, anon-rss:{rng.randint(10**8, 5 * 10**8)}kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:812340kB oom_score_adj:0")
        c.elastic_summary(bad, -9, signal="SIGKILL")
    elif kind == 3:
        c.traceback(bad, ["/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py"], f"RuntimeError: DataLoader worker (pid {rng.randint(1000, 90000)}) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.")
    elif kind == 4:
        c.sidecar["job"] = {"state": "OUT_OF_MEMORY", "reason": "OutOfMemory"}
    elif kind == 5:
        c.elastic_summary(bad, -9, signal="SIGKILL")
        c.lines.append(f"srun: error: {host}: task {bad}: Exited with exit code 1")
    else:
        c.traceback(bad, ["/workspace/data/tokenize.py"], "MemoryError")
    # the kernel's OOM killer on one node of several names that node (a job's own cgroup limit names none)
    one_node = kind == 2 and len({c.host_of(r) for r in range(c.world)}) > 1
    c.write(f"host_oom_{i:02d}", exp("host_oom", "resource", [host] if one_node else None))


SCENARIOS = [
    (benign, 32), (nccl_timeout, 10), (nccl_error, 6), (cuda_error, 7), (gpu_oom, 7), (gpu_hardware, 10),
    (interconnect, 7), (hang, 5), (node_failure, 6), (time_limit, 5), (preempted, 5), (app_error, 10),
    (data_io, 7), (host_oom, 7),
]


def main() -> None:
    start_afresh(OUT)
    rng = random.Random(20240501)
    for fn, count in SCENARIOS:
        for i in range(count):
            fn(random.Random(rng.getrandbits(64)), i)
    print(f"wrote {len(list(OUT.glob('*.log')))} cases to {OUT}")


if __name__ == "__main__":
    main()
