"""The one place where a cluster's job-log source is built from settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.logs.files import LocalFileLogSource, SftpLogSource

if TYPE_CHECKING:  # adapters never import workers at run time
    from workers.settings import ClusterSettings


def build_log_source(cluster: ClusterSettings, slurm: object) -> LocalFileLogSource | SftpLogSource:
    """Job output files: read locally, or over SFTP through the Slurm adapter's SSH connection."""
    logs = cluster.logs
    if cluster.scheduler.access == "ssh":
        runner = getattr(slurm, "runner", None)
        connection = getattr(runner, "connection", None)
        if connection is None:
            raise TypeError("SSH access needs the Slurm client's SSH runner for SFTP")
        return SftpLogSource(connection, max_bytes=logs.max_bytes_per_read, max_line_bytes=logs.max_line_bytes)
    return LocalFileLogSource(max_bytes=logs.max_bytes_per_read, max_line_bytes=logs.max_line_bytes)
