"""Watch fixtures: an empty audit store (SQLite file or a fresh MariaDB database) for the watch-state table."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

_TAG = secrets.token_hex(4)


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def state_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'audit.db'}"
        return
    server = sa.make_url(request.getfixturevalue("mysql_url"))
    name = f"jm_watch_{_TAG}_{secrets.token_hex(3)}"
    admin = sa.create_engine(server, poolclass=NullPool)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield server.set(database=name).render_as_string(hide_password=False)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
    admin.dispose()


@pytest.fixture(scope="session")
def screen():  # noqa: ANN201 - activities.screening.LogScreen
    """The catalogue's screener, compiled once for every watch test."""
    from activities.screening import LogScreen

    return LogScreen()
