"""Log sources: job output files (local or SFTP) and log stores (Loki, VictoriaLogs)."""

from adapters.logs.files import LocalFileLogSource, LogSource, SftpLogSource, tail_window
from adapters.logs.loki import LokiLogSource
from adapters.logs.models import LogChunk, LogRecord
from adapters.logs.stores import JobLogStore
from adapters.logs.victorialogs import VictoriaLogsSource

__all__ = [
    "JobLogStore",
    "LocalFileLogSource",
    "LogChunk",
    "LogRecord",
    "LogSource",
    "LokiLogSource",
    "SftpLogSource",
    "VictoriaLogsSource",
    "tail_window",
]
