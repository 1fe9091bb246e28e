"""Choosing the log sources once, from settings."""

from __future__ import annotations

from adapters.errors import ConfigError
from adapters.logs.files import ConnectionProvider, LocalFileLogSource, LogSource, SftpLogSource
from adapters.logs.loki import LokiLogSource
from adapters.logs.store_source import StoreLogSource
from adapters.logs.stores import JobLogStore
from adapters.logs.victorialogs import VictoriaLogsSource
from workers.settings import LogSourceSettings


def file_log_source(settings: LogSourceSettings, *, connection_provider: ConnectionProvider | None = None) -> LogSource:
    """Job output files: over SFTP when the scheduler is reached by SSH (give its connection), else local."""
    if connection_provider is not None:
        return SftpLogSource(
            connection_provider,
            max_bytes=settings.max_bytes_per_read,
            max_line_bytes=settings.max_line_bytes,
            timeout_s=settings.timeout_s,
        )
    return LocalFileLogSource(max_bytes=settings.max_bytes_per_read, max_line_bytes=settings.max_line_bytes)


def job_log_store(settings: LogSourceSettings) -> JobLogStore | None:
    """The log store named by `logs.kind`, or None for `files` (job output files only)."""
    if settings.kind == "files":
        return None
    if not settings.url:
        raise ConfigError(f"logs.url is required when logs.kind is {settings.kind!r} (the store's base URL)")
    options = {
        "job_label": settings.job_label,
        "host_label": settings.host_label,
        "extra_selector": settings.extra_selector,
        "timeout_s": settings.timeout_s,
        "bearer_token": settings.bearer_token,
        "max_line_bytes": settings.max_line_bytes,
    }
    if settings.kind == "loki":
        return LokiLogSource(settings.url, **options)  # type: ignore[arg-type]
    return VictoriaLogsSource(settings.url, **options)  # type: ignore[arg-type]


def watch_log_source(settings: LogSourceSettings, *, connection_provider: ConnectionProvider | None = None) -> LogSource:
    """What the watch and the evidence collector read a job's lines from: `logs.kind` decides.

    `files`: the job's output files (SFTP in SSH mode); `loki` / `victorialogs`: the store,
    read behind the same cursors as a file.
    """
    store = job_log_store(settings)
    if store is None:
        return file_log_source(settings, connection_provider=connection_provider)
    return StoreLogSource(
        store, scheme=settings.kind, settle_s=settings.store_settle_s, backoff_s=settings.store_backoff_s,
        max_bytes=settings.max_bytes_per_read,
    )
