"""What the log sources return: a chunk of a job's output file, or records from a log store."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from workflows.contracts import LogCursor


class LogChunk(BaseModel):
    """Complete lines read from one log file since the cursor, and the cursor after them.

    `lines` are cleaned (ANSI escapes, NULs and control bytes removed, invalid UTF-8
    replaced, `\\r` progress frames collapsed to the newest) and at most
    `max_line_bytes` long; `cut_line_nos` lists the line numbers of those cut short.
    """

    model_config = ConfigDict(extra="ignore")

    lines: list[str] = Field(default_factory=list)
    cursor: LogCursor  # where the next read starts
    first_line_no: int = 1  # 1-based number of lines[0]
    reset: bool = False  # truncation or rotation seen: reading restarted at offset 0
    missing: bool = False  # the file does not exist (yet, or any more)
    bytes_read: int = 0
    more: bool = False  # more data is already waiting: read again without sleeping
    cut_line_nos: list[int] = Field(default_factory=list)


class LogRecord(BaseModel):
    """One log line from a log store (Loki, VictoriaLogs)."""

    model_config = ConfigDict(extra="ignore")

    timestamp: datetime
    line: str
    host: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
