"""Choosing log sources from settings."""

from __future__ import annotations

import pytest

from adapters.errors import ConfigError, LogSourceError
from adapters.logs import LocalFileLogSource, LokiLogSource, SftpLogSource, VictoriaLogsSource
from workers.factories.logs import file_log_source, job_log_store
from workers.settings import LogSourceSettings


def test_files_kind_has_no_store_and_reads_locally_or_over_sftp() -> None:
    settings = LogSourceSettings(max_bytes_per_read=1234, max_line_bytes=99)
    assert job_log_store(settings) is None
    local = file_log_source(settings)
    assert isinstance(local, LocalFileLogSource) and local.max_bytes == 1234 and local.max_line_bytes == 99

    async def provider():  # noqa: ANN202 - never called here
        raise AssertionError

    assert isinstance(file_log_source(settings, connection_provider=provider), SftpLogSource)


def test_store_kinds() -> None:
    loki = job_log_store(LogSourceSettings(kind="loki", url="http://loki:3100", job_label="jobid"))
    assert isinstance(loki, LokiLogSource) and loki.selector("5") == '{jobid="5"}'
    vl = job_log_store(LogSourceSettings(kind="victorialogs", url="http://vl:9428"))
    assert isinstance(vl, VictoriaLogsSource) and vl.filter("5") == '"slurm_job_id":="5"'
    with pytest.raises(ConfigError, match="logs.url is required"):
        job_log_store(LogSourceSettings(kind="loki"))
    with pytest.raises(LogSourceError, match="logs.job_label"):
        job_log_store(LogSourceSettings(kind="victorialogs", url="http://vl", job_label="a b"))
