"""Which hosts, ranks and GPUs the evidence blames for a chosen root cause.

Pure code. Hosts come from the lines that condemn a device, the far end of a failed link (or the
end that lost several), a node-local mount, torchrun's first failed worker, the node the
cluster-wide view saw fail other jobs; ranks from the crashing processes; a GPU only as faulty
hardware, on a blamed node.
"""

from __future__ import annotations

import re

from activities.detection.line_context import MAX_LINE, parse_context
from activities.detection.root_cause import Choice
from activities.detection.signals import PCI, Signal, SignalBuilder, norm_pci
from workflows.contracts import Category, FaultDomain, JobEvidence


def implicate(
    b: SignalBuilder, choice: Choice, evidence: JobEvidence, *, cat: Category, domain: FaultDomain, sigs: list[Signal],
) -> tuple[set[str], set[int], set[str]]:
    """The hosts, ranks and GPUs a careful operator would blame for `choice` (and why, added to `choice.why`)."""
    hosts: set[str] = set(choice.hosts)
    ranks: set[int] = set(choice.ranks)
    gpus: set[str] = set()
    if implicates_hosts(cat, domain):
        any_condemns = any(x.condemns for x in sigs)
        if cat in (Category.NODE_FAILURE, Category.GPU_HARDWARE) and any(x.host_from == "message" for x in sigs):
            sigs_for_hosts = [x for x in sigs if x.host_from == "message" or x.source == "node"]
        else:
            sigs_for_hosts = sigs
        for s in sigs_for_hosts:
            if any_condemns and not s.condemns:
                continue  # the condemning lines name the node; the rest may come from victims
            if cat == Category.INTERCONNECT and not (s.condemns or s.severity == "fatal" or s.host_from == "message"):
                continue  # a rank that lost its peer is not the faulty one (a host the line names may be)
            if s.host:
                hosts.add(s.host)
    for s in sigs:
        if s.rank is not None and cat not in (Category.NCCL_TIMEOUT, Category.HANG) and s.role != "scheduler":
            ranks.add(s.rank)
        elif s.rank is None and "task_ids" in s.fields and cat not in (Category.NCCL_TIMEOUT, Category.HANG):
            # "srun: error: node3: tasks 5-7: Out Of Memory": Slurm's task ids are the ranks
            ranks.update(int(t) for t in s.fields["task_ids"].split(","))
        if s.gpu and gpu_at_fault(cat, domain):
            gpus.add(s.gpu)
    if cat == Category.CUDA_ERROR and not hosts and domain != FaultDomain.APPLICATION:
        # a CUDA error is the code's unless the driver logged an Xid on that host too: then suspect the GPU
        erring = {s.host for s in sigs if s.host}
        root = b.elastic_root()
        if not erring and root is not None and root[0]:
            erring = {root[0]}  # torchrun's first failed worker is where the CUDA error happened
        xid_hosts = {s.host for s in b.signals if s.fields.get("xid")}
        if None in xid_hosts and len(erring) == 1:
            xid_hosts |= erring  # a bare dmesg line printed by the job: the host it ran on
        if any(s.pattern_id in _DEVICE_CUDA_ERRORS for s in sigs):
            xid_hosts |= erring  # the error text itself points to the device
        hosts |= erring & xid_hosts
    if cat == Category.DATA_IO and not hosts:
        hosts |= _local_mount(sigs, b)
    if cat == Category.DATA_IO and not hosts:
        hosts |= _lost_client(sigs, b)
    if cat == Category.CUDA_ERROR and not hosts and domain == FaultDomain.SYSTEM_SOFTWARE:
        # a driver/runtime mismatch on some nodes only is those nodes' software; on all of them, the image's
        erring = {s.host for s in sigs if s.host}
        if erring and b.job_hosts and erring < b.job_hosts:
            hosts |= erring
    link_lines = sigs if cat == Category.INTERCONNECT else [
        s for s in b.signals if s.category in (Category.NCCL_ERROR, Category.INTERCONNECT) and s.source == "log"]
    if cat in (Category.INTERCONNECT, Category.NCCL_ERROR, Category.NCCL_TIMEOUT) and any(s.peers for s in link_lines):
        blamed, why = _link_blame(link_lines, b.signals)
        if blamed and (cat == Category.INTERCONNECT or not hosts):
            if cat == Category.INTERCONNECT:
                hosts = set(blamed)
            else:
                hosts |= set(blamed)
            choice.why = (choice.why + "; " if choice.why else "") + why
    if cat == Category.NCCL_ERROR and not hosts:
        # NCCL sockets closed or reset from one node's end ('Connection closed by remote peer ADDR'): its process
        # went away first (the reporters are the ones left behind)
        closers = {s.host for s in link_lines if s.pattern_id == "nccl_socket_peer_closed"
                   and s.host_from == "message" and s.host}
        if len(closers) == 1 and (not b.job_hosts or closers <= b.job_hosts):
            hosts |= closers
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"the NCCL connections were closed from {next(iter(closers))}'s end")
    if cat == Category.INTERCONNECT and not hosts:
        # a port a node's own tool shows down (ibstat, ibv_devinfo, rdma link) is that node's NIC or cable;
        # the transfer errors on the other nodes are what its peers saw of it
        down = {s.host for s in sigs if s.pattern_id in _PORT_DOWN and s.host}
        if len(down) == 1:
            hosts |= down
            choice.why = (choice.why + "; " if choice.why else "") + f"{next(iter(down))} shows its own port down"
    if cat == Category.INTERCONNECT and hosts and "far end" not in choice.why:
        far = [s for s in sigs if s.host in hosts and s.fields.get("peer") and s.host_from == "message"]
        if far:
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"{len(far)} failed link(s) name {', '.join(sorted({s.host for s in far if s.host}))} as their far end")
    if cat == Category.NODE_FAILURE and not hosts:
        hosts |= _failed_node(b)
    notices = [s.pattern_id for s in sigs if s.pattern_id]
    if (cat == Category.NODE_FAILURE and notices and set(notices) <= _RUNTIME_START and len(b.job_hosts) > 1
            and hosts >= b.job_hosts):
        hosts = set()  # no node could start its container: the image or the site's hooks, not a node
    if cat == Category.NODE_FAILURE and notices and all(p in _CANCEL_NOTICES for p in notices):
        # slurmstepd's '*** JOB N ON HOST CANCELLED ... DUE TO NODE FAILURE' is printed by the batch host, which
        # is alive to print it; the node the survivors' links lost (a peer named by several, or the far end) failed
        links = [s for s in b.signals if s.source == "log" and s.peers
                 and s.category in (Category.NCCL_ERROR, Category.INTERCONNECT)]
        lost, why = _link_blame(links, b.signals) if links else ([], "")
        lost = [h for h in lost if h in b.job_hosts]
        # a launcher that names the node it lost ('Remote daemon: ... on node X', 'No reply from X') knows better
        launcher_lost = sorted({s.host for s in b.signals if s.category == Category.NODE_FAILURE
                                and s.role == "cause" and s.source == "log" and s.host and s.host in b.job_hosts
                                and s.pattern_id not in _CANCEL_NOTICES})
        if launcher_lost and len(launcher_lost) < len(b.job_hosts):
            lost, why = launcher_lost, f"the launcher lost {', '.join(launcher_lost)}"
        if lost:
            hosts = set(lost)
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"the node failure's notice comes from the batch host; {why}")
    root = b.elastic_root()
    if root is not None and cat not in (Category.NCCL_TIMEOUT, Category.HANG, Category.PREEMPTED, Category.TIME_LIMIT):
        if not hosts and root[0] and implicates_hosts(cat, domain):
            hosts.add(root[0])
        if root[1] is not None and not ranks and (not hosts or not root[0] or root[0] in hosts):
            # torchrun's first observed failure: the rank that went first; on a blamed node when nodes are
            # blamed (a worker elsewhere that lost its peer went first only because it noticed first)
            ranks.add(root[1])
    failed = b.first_failed()
    if failed is not None and cat not in (Category.NCCL_TIMEOUT, Category.HANG, Category.PREEMPTED,
                                          Category.TIME_LIMIT):
        # the process a launcher says ended first of its own failure (srun's exit code, mpirun's signal,
        # DeepSpeed's return code); on a blamed node when nodes are blamed
        host, first = failed
        if first and (not hosts or host is None or host in hosts) and (not ranks or cat == Category.NCCL_ERROR):
            ranks |= set(first)
    if cat == Category.HANG:
        hosts |= set(evidence.straggler_hosts)
    if cat in (Category.NCCL_TIMEOUT, Category.NCCL_ERROR, Category.HANG, Category.INTERCONNECT) and not hosts:
        repeat = [h for h in sorted(b.job_hosts) if evidence.node_failure_counts.get(h, 0) >= 2]
        if len(repeat) == 1:
            hosts.add(repeat[0])
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"{repeat[0]} failed {evidence.node_failure_counts[repeat[0]]} other jobs recently")
    if cat == Category.INTERCONNECT and not hosts:
        # a transport error with no peer in it is the reporter's own NIC (RC: -22 opening its endpoint);
        # when a single node of three or more reports them, it is the one (of two, its one peer is as suspect)
        local = {s.host for s in sigs if s.host and not s.peers and s.host_from in ("prefix", "layout")}
        own_device = any(_LOCAL_VERBS.search(s.text or s.line) for s in sigs if s.host in local)
        if len(local) == 1 and (len(b.job_hosts) > 2 or not b.job_hosts or own_device):
            hosts |= local
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"only {next(iter(local))} reports the transport failing, naming no peer")
    if hosts and not ranks and cat in (Category.GPU_HARDWARE, Category.NODE_FAILURE, Category.CUDA_ERROR,
                                       Category.DATA_IO, Category.INTERCONNECT):
        # the ranks that crashed on the blamed node are where it showed
        crashed = (s.rank if s.rank is not None else s.task for s in b.signals
                   if s.host in hosts and s.source == "log" and s.strong and (s.rank is not None or "tasks" in s.fields)
                   and (s.category in _RANK_CRASH or s.category == cat == Category.DATA_IO))
        ranks |= {r for r in crashed if r is not None}
    local_cause = cat in _NODE_LOCAL and (cat != Category.CUDA_ERROR or domain == FaultDomain.HARDWARE)
    # a memory monitor naming the node that ran low ("Memory on the node (IP: ...)") singles it out among
    # the job's nodes; on a one-node job the job outgrew the node, and a cgroup limit (Slurm's oom-kill
    # events, "Exceeded job memory limit") is the job's own wherever it bit: neither blames a node
    oom_node = _one_node_oom(sigs, b) if cat == Category.HOST_OOM and len(b.job_hosts) > 1 else None
    node_oom = cat == Category.HOST_OOM and len(b.job_hosts) > 1 and (oom_node is not None or any(
        _NODE_MEMORY.search(s.text or s.line) for s in sigs if s.source == "log" and s.strong))
    if not hosts and (local_cause or node_oom):
        named = named_near(b, sigs)
        if len(named) == 1:
            hosts |= named
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"the failing lines name {next(iter(named))} and no other of the job's nodes")
    if not hosts and oom_node is not None:
        hosts.add(oom_node)  # the kernel's OOM lines were written on it (a syslog header, a launcher prefix)
        choice.why = (choice.why + "; " if choice.why else "") + (
            f"the kernel's OOM killer ran on {oom_node} and on no other of the job's nodes")
    if not hosts and ranks and len(b.job_hosts) > 1 and gpu_at_fault(cat, domain):
        # a device fault printed without a host ('call to cuCtxCreate returned error 214 (ECC_UNCORRECTABLE)')
        # by ranks the layout puts on one node: that node's GPU
        placed = {b.host_of_rank(r) for r in ranks}
        if len(placed) == 1 and None not in placed:
            hosts |= placed  # type: ignore[arg-type]
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"the failing ranks {', '.join(map(str, sorted(ranks)))} all run on {next(iter(placed))}")
    if cat in (Category.GPU_HARDWARE, Category.CUDA_ERROR) and len(hosts) == 1 and (
            cat == Category.GPU_HARDWARE or domain == FaultDomain.HARDWARE):
        host = next(iter(hosts))
        # the driver's own Xid lines on that host name the GPU by its bus id: before an index worked out from a
        # rank's prefix (a launcher that prints one rank's lines for the node's processes)
        xid_gpus = {s.gpu for s in b.signals if s.fields.get("xid") and s.gpu and s.host == host
                    and s.category in (Category.GPU_HARDWARE, Category.INTERCONNECT)}  # NVLink Xids too
        if len(xid_gpus) == 1 and all(g.count(":") == 1 for g in gpus if g.split(":", 1)[0] == host):
            gpus = {g for g in gpus if g.split(":", 1)[0] != host} | xid_gpus
        if not any(g.split(":", 1)[0] == host for g in gpus if ":" in g):
            gpus |= {f"{host}:{g}" for g in (_gpu_near(b, sigs) or _section_gpu(b, sigs))}
        if not gpus and len(ranks) == 1:
            slot = _local_rank(b, host, next(iter(ranks)))
            if slot is not None:
                gpus.add(f"{host}:{slot}")  # one process per GPU: the failed rank's local rank is its device
    if b.job_hosts and hosts & b.job_hosts and not hosts <= b.job_hosts:
        # a name that is none of the job's nodes beside ones that are (a pod's name in Open MPI's 'on node
        # resnet-hvd-worker-1' next to the Kubernetes node it ran on): only a job node can be kept out of the job
        hosts &= b.job_hosts
    if len(b.job_hosts) >= 2 and hosts >= b.job_hosts and cat != Category.NODE_FAILURE:
        # every node of the job blamed alike (each reports the same transport error): nothing singles one
        # out, and a restart without all of them is no restart; the cause is common to them (config, fabric)
        choice.why = (choice.why + "; " if choice.why else "") + (
            "every node of the job shows it alike: no node is singled out")
        hosts = set()
    gpus = {b.bus_spelling(g) for g in gpus}
    if hosts:  # a GPU is evidence on a blamed node; the far end's view of its own device is not
        gpus = {g for g in gpus if g.split(":", 1)[0] in hosts or ":" not in g}
    return hosts, ranks, gpus


# causes that live on one node; not host OOM: a job that outgrows a node's memory is the job's, not the node's,
# unless the message singles out one node of several
_NODE_LOCAL = {Category.GPU_HARDWARE, Category.NODE_FAILURE, Category.INTERCONNECT, Category.CUDA_ERROR}
_KERNEL_OOM = re.compile(r"(?i)Out of memory: Kill|oom-kill:|invoked oom-killer|Killed process [0-9]")
_CGROUP_LIMIT = re.compile(r"(?i)oom[_-]kill event|Exceeded (job|step) memory limit|memory cgroup out of memory|oom_memcg=|cgroup")
_NODE_MEMORY = re.compile(r"(?i)node running low on memory|NODE_OUT_OF_MEMORY|memory pressure|Memory on the node|System memory low at node")
NEAR = 3  # lines either side of a failing line that belong to its message (Ray's "ip: ..." block, a wrapped line)
_GPU_REF = re.compile(r"(?i)(?<![A-Za-z0-9_])(?:gpu[ _-]?(?:id|index)?[ #:=]{0,3}|cuda:)([0-9]{1,2})(?![0-9A-Za-z:.])")


def _near_texts(b: SignalBuilder, sigs: list[Signal]) -> list[str]:
    """The text (without launcher prefixes) of the chosen cause's failing lines and of the lines next to them."""
    at = sorted({s.line_no for s in sigs if s.source == "log" and s.strong and s.line_no is not None})
    if not at:
        return []
    texts = [s.text or s.line for s in sigs if s.source == "log" and s.strong]
    for n, line in b.lines:
        if any(abs(n - a) <= NEAR for a in at):
            texts.append(parse_context(line[:MAX_LINE], known_hosts=b.spellings).text)
    return texts


def named_near(b: SignalBuilder, sigs: list[Signal]) -> set[str]:
    """The job's nodes the failing lines of a node-local cause (or the lines of the same message) name
    in their text, not in a prefix: the writer of a line is often a survivor, the node in its words is not."""
    if not b.nodemap:
        return set()
    nodes = b.job_hosts or b.nodemap.names
    named: set[str] = set()
    for text in _near_texts(b, sigs):
        named |= {h for h in b.nodemap.mentioned(text) if h in nodes}
    return named


def _local_rank(b: SignalBuilder, host: str, rank: int) -> int | None:
    """`rank`'s place among the ranks of `host` when the layout runs one task per GPU (at most 8 a node)."""
    layout = b.layout
    if layout is None or host not in layout.nodes or len(layout.tasks_per_node) != len(layout.nodes):
        return None
    index = layout.nodes.index(host)
    first = sum(layout.tasks_per_node[:index])
    per_node = layout.tasks_per_node[index]
    if not 1 < per_node <= 8 or not first <= rank < first + per_node:
        return None
    return rank - first


def _gpu_near(b: SignalBuilder, sigs: list[Signal]) -> set[str]:
    """The one GPU (PCI bus id or index) the failing lines name, else the one their message names."""
    own = [s.text or s.line for s in sigs if s.source == "log" and s.strong]
    # a health tool's verdict names its GPU among the rows it printed for every GPU ("GPU ID: 0 ... 3", then
    # "... error count (212) for ... GPU ID 3"): the failing line's own reference first
    return _one_gpu(own) or _one_gpu(_near_texts(b, sigs))


def _one_gpu(texts: list[str]) -> set[str]:
    pcis: set[str] = set()
    indexes: set[str] = set()
    for text in texts:
        pcis |= {norm_pci(m.group(1)) for m in PCI.finditer(text)}
        indexes |= {m.group(1) for m in _GPU_REF.finditer(text)}
    if len(pcis) == 1:
        return pcis
    if not pcis and len(indexes) == 1:
        return indexes
    return set()


_PORT_DOWN = {"ib_port_state_down"}
# a verbs call failing on the caller's own device (its RoCE netdev/GID gone, memory it cannot register): that
# node's NIC even when its one peer is as much in the failed link
# a node's own device failing to open, not a transfer to a peer: verbs calls on a missing RoCE netdev or unregistrable
# memory; aws-ofi-nccl unable to create an endpoint on its own domain (libfabric's efa provider came up empty)
_LOCAL_VERBS = re.compile(r"Call to ibv_[a-z_]{2,30} failed with error (No such device|Cannot allocate memory)"
                          r"|NET/OFI Creating new endpoint for domain [0-9a-fx]{1,20} failed")
# nvidia-smi -q: "GPU 00000000:3B:00.0" opens a section of indented "Field : value" lines about that GPU
_NVSMI_SECTION = re.compile(r"^GPU ((?:[0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9])?\s*$")


def _section_gpu(b: SignalBuilder, sigs: list[Signal]) -> set[str]:
    """The GPU whose `nvidia-smi -q` section the failing lines are in: the section header above them, with
    only indented lines of the same section in between (every failing line in the same one)."""
    at = sorted({s.line_no for s in sigs if s.source == "log" and s.strong and s.line_no is not None})
    if not at:
        return set()
    found: set[str] = set()
    lines = dict(b.lines)
    for line_no in at:
        n = line_no
        while True:
            n -= 1
            line = lines.get(n)
            if line is None:
                return set()  # a gap: the section's start is not in what the verdict has
            text = parse_context(line[:MAX_LINE], known_hosts=b.spellings).text
            m = _NVSMI_SECTION.match(text)
            if m:
                found.add(norm_pci(m.group(1)))
                break
            if text.strip() and not text[:1].isspace():
                return set()  # the failing line is not inside a GPU's section
    return found if len(found) == 1 else set()


_IB_LOCAL_STATUS = {"1", "2", "3", "4", "8"}  # ibv_wc_status LOC_LEN, LOC_QP_OP, LOC_EEC_OP, LOC_PROT, MW_BIND


def _link_blame(sigs: list[Signal], everything: list[Signal]) -> tuple[list[str], str]:
    """Which end of a failed link the evidence points to.

    Each line that names a peer is one vote (reporter, peer). A node named as the peer by two or
    more reporters is the common end; a reporter that lost two or more different peers is itself
    the broken end; a single pair blames the far end, since the reporter is the one still alive to
    complain, unless the reporter's own device errors are in the log too.
    """
    local = sorted({s.host for s in sigs if s.host and s.fields.get("wc_status") in _IB_LOCAL_STATUS})
    if local:
        return local, f"the work completion status on {', '.join(local)} is a local error: its own NIC or memory registration"
    pairs = {(s.host, p) for s in sigs for p in s.peers if s.host != p}
    if not pairs:
        return [], ""
    as_peer: dict[str, set] = {}
    as_reporter: dict[str, set] = {}
    for reporter, peer in pairs:
        as_peer.setdefault(peer, set()).add(reporter)
        if reporter:
            as_reporter.setdefault(reporter, set()).add(peer)
    common = sorted(p for p, who in as_peer.items() if len(who) >= 2)
    if common:
        return common, f"{', '.join(common)} is the far end named by {max(len(as_peer[p]) for p in common)} reporting nodes"
    broken = sorted(r for r, peers in as_reporter.items() if len(peers) >= 2)
    if broken:
        return broken, f"{', '.join(broken)} lost its links to several peers: the fault is on its side"
    reporter, peer = sorted(pairs, key=lambda p: (p[0] or "", p[1]))[0]
    local_device = [s for s in everything if s.host == reporter and s.condemns]
    if reporter and local_device:
        return [reporter], f"{reporter} reports device errors of its own; {peer} is the far end of its failed link"
    where = f" from {reporter}" if reporter else ""
    return [peer], f"the failed link{where} points to its far end {peer}"


_RANK_CRASH = {Category.CUDA_ERROR, Category.GPU_HARDWARE, Category.APP_ERROR, Category.NODE_FAILURE, Category.NCCL_ERROR}
_RUNTIME_START = {"container_start_failed"}  # a node's container runtime, when the others started theirs
_CANCEL_NOTICES = {"slurm_cancelled_node_failure"}  # printed by the batch host about the job, not about itself
_FS_CLIENT_LOST = {"lustre_error", "lustre_client_lost_server", "nfs_server_not_responding", "fs_client_stuck_frame"}  # a client's own account of losing its file-system servers
_MOUNT_ERRORS = {"stale_file_handle", "io_error", "disk_full", "checkpoint_write_failed", "file_not_found"}
_NODE_LOCAL_PATH = re.compile(r"['\" (](/(?:local|localscratch|lscratch|scratch/local|local_scratch|tmp|raid[0-9]?|nvme[0-9a-z]*|ssd|mnt/local|mnt/nvme|local_disk[0-9]?|dev/nvme)[/'\" ]|\$TMPDIR|SLURM_TMPDIR)")
# a df row of a node-local block device at (nearly) 100 %: '/dev/nvme0n1p2  880G  880G  0 100% /'
_LOCAL_DEVICE_FULL = re.compile(r"^/dev/(?:nvme|sd|md|vd|xvd|hd)[A-Za-z0-9]{0,12}\s+\S+\s+\S+\s+\S+\s+(?:100|99)%\s+/")
_DEVICE_CUDA_ERRORS = {"cuda_unknown_error"}  # "CUDA error: unknown error": usually a GPU that became unusable


def _one_node_oom(sigs: list[Signal], b: SignalBuilder) -> str | None:
    """The node of several where the kernel's OOM killer ran, when it ran on exactly one: that node ran out, the
    others did not; a cgroup limit the job set for itself (Slurm's oom-kill events) is the job's wherever it
    bit, and a SIGKILL alone says nothing of whose memory."""
    oom = [s for s in b.signals if s.category == Category.HOST_OOM and s.source == "log"]
    if any(_CGROUP_LIMIT.search(s.text or s.line) for s in oom):
        return None
    hosts = {s.host for s in oom if _KERNEL_OOM.search(s.text or s.line)}
    return next(iter(hosts)) if len(hosts) == 1 and None not in hosts and hosts < b.job_hosts else None


def _failed_node(b: SignalBuilder) -> set[str]:
    """The node of a node failure whose chosen evidence names none (Slurm's NODE_FAIL): the one the nodes' own
    records show failing, else the one host strong log lines say was lost (a survivor's 'task:5 heartbeat
    timeout' is about task 5's node). Before the launcher's first failed rank, which is only the first to notice."""
    failing = {s.host for s in b.signals if s.source == "node" and s.category == Category.NODE_FAILURE and s.host}
    if failing:
        return failing
    named = {s.host for s in b.signals if s.source == "log" and s.category == Category.NODE_FAILURE and s.strong
             and s.host_from == "message" and s.host}
    return named if len(named) == 1 else set()


def _local_mount(sigs: list[Signal], b: SignalBuilder) -> set[str]:
    """The node whose own disk failed: storage errors on a node-local path (local scratch, /tmp,
    NVMe, RAID) seen on exactly one node. A shared file system's errors (stale NFS handles, EIO on
    Lustre/GPFS, a full project quota) are the storage's problem, not a node's, wherever they show. The kernel's
    own word that one node's disk fails (NVMe I/O errors, XFS corruption on a local device) names it first."""
    disk = {s.host for s in b.signals if s.pattern_id == "local_disk_io_error" and s.host}
    if len(disk) == 1:
        return disk
    if any(s.pattern_id == "disk_full" for s in sigs):
        # 'df' run on the node (`ssh NODE df -h PATH`) shows its own device full: that node's disk
        full = {b.host_of_session(n) for n, line in b.lines if _LOCAL_DEVICE_FULL.search(b._strip(line))}
        full.discard(None)
        if len(full) == 1 and (not b.job_hosts or full <= b.job_hosts):
            return {h for h in full if h}
    mount = [s for s in sigs if s.pattern_id in _MOUNT_ERRORS and _NODE_LOCAL_PATH.search(s.text or s.line)]
    seen = {s.host for s in mount if s.host}
    root = b.elastic_root()
    if mount and not seen and root is not None and root[0]:
        seen = {root[0]}  # torchrun's first failed worker is where the mount broke
    if len(seen) != 1:
        return set()
    return seen


def _lost_client(sigs: list[Signal], b: SignalBuilder) -> set[str]:
    """The node whose file-system client lost its servers (Lustre's LNet timeouts, obd_ping failures, an
    eviction), when those client lines come only from the node whose process failed: that node's client (its
    mount, its fabric port), not the shared storage, which the other nodes still reached."""
    client = {s.host for s in b.signals if s.pattern_id in _FS_CLIENT_LOST}
    failed = b.first_failed()
    erring = {s.host for s in sigs if s.host} | ({failed[0]} if failed is not None and failed[0] else set())
    if len(client) != 1 or None in client or client != erring:
        return set()
    return {h for h in client if h}


def gpu_at_fault(cat: Category, domain: FaultDomain) -> bool:
    """Whether the GPUs the evidence names are suspects: a GPU is named only as faulty hardware. An OOM, a
    CUDA error of the code or a failed network transfer happens on some device, which says nothing against it."""
    return cat == Category.GPU_HARDWARE or (cat in (Category.CUDA_ERROR, Category.INTERCONNECT)
                                            and domain == FaultDomain.HARDWARE)


def implicates_hosts(cat: Category, domain: FaultDomain) -> bool:
    """Whether the hosts the evidence came from are suspects (not just where a victim or a bug showed)."""
    if cat in (Category.NCCL_TIMEOUT, Category.NCCL_ERROR):
        return False  # every rank reports these; suspects are worked out separately
    if cat == Category.CUDA_ERROR:
        return domain == FaultDomain.HARDWARE  # a CUDA error alone is the code's; the GPU only with hardware words
    if cat == Category.DATA_IO:
        return False  # storage is shared; a mount broken on one node is worked out in _local_mount
    # a hang is reported by every stuck rank alike; its suspects are the stragglers named separately
    return cat in (Category.GPU_HARDWARE, Category.INTERCONNECT, Category.NODE_FAILURE)

