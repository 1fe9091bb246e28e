"""Failure families and attribution forms added from real-format tune excerpts (tests/corpus/real/tune/)."""

from __future__ import annotations


from workflows.contracts import Category

from tests.detection.real_cases import TUNE, verdict_of



def test_jax_coordination_heartbeat_timeout_is_the_task_that_went():
    """XLA/TSL: 'Task /job:jax_worker/replica:0/task:3 heartbeat timeout' names the process (and, through the
    layout, the node) the others lost; the 'preempted' in its prose is not the scheduler's reason."""
    v = verdict_of("node_failure-jax-coordination-task-heartbeat-timeout-q9n07")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.ranks == [3] and v.implicated.hosts == ["jxa-07"]


def test_ray_marked_dead_in_the_pre_1x_wording():
    """Ray before 1.x: '... has been marked dead because the monitor has missed too many heartbeats'."""
    v = verdict_of("node_failure-ray-old-client-id-marked-dead-q9n04")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == []  # the line gives a client id, no node


def test_a_pasted_shell_session_names_the_host_by_its_prompt():
    """'root@gpu-node07:~# dmesg -T | grep NVRM' then the Xid 79 lines: the node is the prompt's, and the GPU's
    bus id (upper case from nvidia-smi, lower case from NVRM) is kept on it."""
    v = verdict_of("gpu_hardware-nvsmi-unknown-dmesg-T-xid79-shell-b6a03")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["gpu-node07"]
    assert v.implicated.gpus == ["gpu-node07:0000:b1:00"]


def test_prompt_host_reads_bash_prompts_and_ssh_commands():
    from activities.detection.launchers import prompt_host

    text = (TUNE / "gpu_hardware-nvsmi-unknown-dmesg-T-xid79-shell-b6a03.log").read_text().splitlines()
    assert prompt_host(text[0]) == "gpu-node07"
    ssh = next(line for line in (TUNE / "hang-dstate-rank0-nvsmi-idle-i3h02.log").read_text().splitlines()
               if line.startswith("$ ssh"))
    assert prompt_host(ssh) == "gpua11"
    assert prompt_host("[rank0]: user@example.org wrote: ok") is None  # an address in prose is no prompt
