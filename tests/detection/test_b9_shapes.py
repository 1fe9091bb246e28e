"""Culprits and causes in forms first met on batch b9's tune excerpts (tests/corpus/real/tune/).

- An uncorrected memory error in the kernel's words (EDAC 'UE memory read error', a machine check exception)
  condemns the node; corrected ones ('CE memory read error') and 'Machine check events logged' alone do not.
- A prompt of the form `[root@mgmt-a01:/root]$` (user@host:path in brackets) is a prompt: on an admin node,
  what follows is about the one job node its command names (`dcgmi diag --host 10.61.8.23:5555`).
- NCCL's RAS report (NCCL 2.24+) names the process it got nothing from ('Process 288417 on node 10.52.8.23
  managing GPU 6'): that node, and its rank where one task runs per GPU, are the timeout's suspects.
- XLA's rendezvous warning ('This thread has been waiting for `initialize clique ...` for 10 seconds') in a
  running job is a hang.
- clush -b frames each block of output with rows of dashes around the nodes it came from; a block of one job
  node is that node's output (an `ibv_devinfo` port in PORT_INIT there is that node's port).
"""

from __future__ import annotations

from workflows.contracts import Category

from tests.detection.real_cases import verdict_of, verdict_of_edited


def test_uncorrected_memory_errors_condemn_the_node_the_session_is_on():
    v = verdict_of("node_failure-mce-ue-dmesg-freeze-g9b03")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["lwx-g09"]


def test_corrected_memory_errors_do_not(tmp_path):
    v = verdict_of_edited("node_failure-mce-ue-dmesg-freeze-g9b03", lambda t: t.replace(" UE memory", " CE memory"),
                          tmp_path)
    assert "memory_uncorrected_error" not in {e.pattern_id for e in v.evidence}


def test_a_dcgmi_diag_run_from_an_admin_prompt_is_about_the_host_it_targets():
    v = verdict_of("gpu_hardware-dcgmi-diag-remote-host-ip-g9a02")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["hgx23"]
    assert v.implicated.gpus == ["hgx23:3"]


def test_nccl_ras_names_the_silent_process_node_and_rank():
    v = verdict_of("nccl_timeout-ncclras-incomplete-by-ip-g9c03")
    assert v.category == Category.NCCL_TIMEOUT
    assert (v.implicated.hosts, v.implicated.ranks) == (["gpu-r04"], [30])


def test_without_the_ras_report_no_node_is_named(tmp_path):
    def no_ras(text: str) -> str:
        return "\n".join(l for l in text.splitlines() if "managing GPU" not in l and "managed by process" not in l)
    v = verdict_of_edited("nccl_timeout-ncclras-incomplete-by-ip-g9c03", no_ras, tmp_path)
    assert v.category == Category.NCCL_TIMEOUT
    assert "gpu-r04" not in v.implicated.hosts


def test_xla_rendezvous_waits_in_a_running_job_are_a_hang():
    v = verdict_of("hang-jax-rendezvous-one-process-missing-g9c16")
    assert v.category == Category.HANG


def test_a_clush_block_of_one_node_is_that_nodes_output():
    v = verdict_of("interconnect-clush-ibv-devinfo-port-init-ip-hostlist-g9a17")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["gpu104"]


def test_a_clush_block_of_several_nodes_names_none(tmp_path):
    """The PORT_INIT block printed for a nodeset of two: no single node's port."""
    v = verdict_of_edited("interconnect-clush-ibv-devinfo-port-init-ip-hostlist-g9a17",
                          lambda t: t.replace("\n10.1.0.104\n", "\n10.1.0.[103-104] (2)\n"), tmp_path)
    assert v.implicated.hosts != ["gpu104"]
