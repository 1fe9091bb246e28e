"""Culprits and causes in forms first met on batch b7's tune excerpts (tests/corpus/real/tune/).

- A node's own disk failing in the kernel's words (NVMe 'Write(0x1) @ LBA ... Data Transfer Error', 'blk_update_request:
  I/O error, dev nvme0n1', 'XFS (nvme1n1p1): Metadata CRC error') is data_io on that node, even when the training
  error names only the path; the ranks that failed writing there are its ranks.
- A process stuck in the file-system client (a hung task's call trace in [lustre]/[obdclass]/[nfs] frames) with
  the Lustre client losing its server on one node explains a job that then ran out of time: data_io, that node.
"""

from __future__ import annotations

from workflows.contracts import Category

from tests.detection.real_cases import verdict_of


def test_nvme_write_errors_in_dmesg_blame_that_nodes_disk():
    """DeepSpeed's 'PytorchStreamWriter failed writing file' on rank 8; dmesg after a prompt on gpu-c12."""
    v = verdict_of("data_io-nvme-data-transfer-error-local-ckpt-deepspeed-e7b07")
    assert v.category == Category.DATA_IO
    assert (v.implicated.hosts, v.implicated.ranks) == (["gpu-c12"], [8])


def test_xfs_corruption_in_a_forwarded_syslog_blames_the_node_by_its_fqdn():
    v = verdict_of("data_io-xfs-crc-scratch-rsyslog-fqdn-ray-ip-e7b08")
    assert v.category == Category.DATA_IO
    assert v.implicated.hosts == ["trn-p4d-0413"]


def test_a_job_timed_out_while_stuck_in_the_lustre_client_is_that_nodes_storage():
    """Before: time_limit (the scheduler's TIMEOUT), no node."""
    v = verdict_of("data_io-fsx-lustre-client-hang-one-node-completing-dstate-e7c24")
    assert v.category == Category.DATA_IO
    assert v.implicated.hosts == ["gpu-dy-p5-5"]
