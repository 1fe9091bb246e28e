"""The Slurm client of one configured cluster, built from its settings."""

from __future__ import annotations

from adapters.errors import ConfigError
from adapters.slurm.client import SlurmClient
from adapters.slurm.runner import CommandRunner, LocalRunner, SshRunner
from workers.settings import ClusterSettings


def build_runner(cluster: ClusterSettings) -> CommandRunner:
    """The command runner `cluster.scheduler.access` asks for."""
    scheduler = cluster.scheduler
    if scheduler.access == "local":
        return LocalRunner(env=scheduler.env)
    ssh = scheduler.ssh
    if ssh is None or ssh.known_hosts is None:  # the settings validators make this impossible
        raise ConfigError(f"clusters.{cluster.name}.scheduler: access 'ssh' needs an ssh section with known_hosts")
    return SshRunner(
        ssh.host,
        port=ssh.port,
        user=ssh.user,
        key_file=ssh.key_file,
        known_hosts=ssh.known_hosts,
        env={**scheduler.env, **ssh.env},
        connect_timeout=ssh.connect_timeout_s,
    )


def build_slurm_client(
    cluster: ClusterSettings, *, deployment: str = "jobmedic", decode_in_child: bool = False
) -> SlurmClient:
    """A `SlurmClient` for `cluster` acting as `deployment` (`Settings.deployment`); close it when done.

    `decode_in_child`: whole listings are decoded in a child process (the worker's watch; a one-shot command
    would only pay for starting it)."""
    return SlurmClient(
        build_runner(cluster), cluster=cluster.name, timeout=cluster.scheduler.command_timeout_s, deployment=deployment,
        decode_in_child=decode_in_child,
    )
