"""Log sources: job output files (local or SFTP) and log stores (Loki, VictoriaLogs)."""

from adapters.logs.files import LocalFileLogSource, LogSource, SftpLogSource, tail_window
from adapters.logs.models import LogChunk, LogRecord

__all__ = ["LocalFileLogSource", "LogChunk", "LogRecord", "LogSource", "SftpLogSource", "tail_window"]
