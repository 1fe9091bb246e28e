"""Database failures leave the store as AuditStoreError, retryable or not, with what to do next."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from adapters.audit import AuditStore, AuditStoreError, AuditStoreRejected, AuditStoreUnavailable
from adapters.errors import ConfigError
from workflows.contracts import AuditEntry

Make = Callable[..., AuditEntry]


@pytest.mark.mysql
def test_unreachable_mysql_is_a_retryable_error(closed_port: int, make_entry: Make) -> None:
    store = AuditStore(f"mysql+pymysql://root@127.0.0.1:{closed_port}/jobmedic")
    expected = rf"is MySQL running at 127\.0\.0\.1:{closed_port}\? jobmedic retries"
    with pytest.raises(AuditStoreError, match=expected) as caught:
        store.record(make_entry())
    assert caught.value.retryable is True
    assert isinstance(caught.value, AuditStoreUnavailable)
    assert isinstance(caught.value.__cause__, sa.exc.OperationalError)
    with pytest.raises(AuditStoreUnavailable):
        store.query()
    store.close()


@pytest.mark.mysql
def test_store_survives_mariadb_going_away_and_coming_back(
    tcp_proxy: Any, mysql_db_url: str, make_entry: Make
) -> None:
    """The store reaches MariaDB through a proxy we switch off: the shared server itself keeps running."""
    url = sa.make_url(mysql_db_url).set(host="127.0.0.1", port=tcp_proxy.port).render_as_string(hide_password=False)
    store = AuditStore(url)
    first, second = make_entry(), make_entry()
    assert store.record(first) is True

    tcp_proxy.stop()  # the pooled connection dies and nothing listens on the port any more
    with pytest.raises(AuditStoreError, match="jobmedic retries") as caught:
        store.record(second)
    assert caught.value.retryable is True
    with pytest.raises(AuditStoreUnavailable):
        store.query()

    tcp_proxy.start()  # same port: the activity's retry now succeeds, exactly once
    assert store.record(second) is True
    assert store.record(second) is False
    assert [e.idempotency_key for e in store.query()] == [first.idempotency_key, second.idempotency_key]
    store.close()


@pytest.mark.mysql
def test_missing_database_is_not_retryable_and_says_how_to_create_it(mysql_url: str, make_entry: Make) -> None:
    url = sa.make_url(mysql_url).set(database="jm_audit_no_such_db").render_as_string(hide_password=False)
    store = AuditStore(url)
    with pytest.raises(AuditStoreRejected, match="CREATE DATABASE jm_audit_no_such_db") as caught:
        store.record(make_entry())
    assert caught.value.retryable is False
    store.close()


@pytest.mark.mysql
def test_wrong_password_is_not_retryable_and_hides_the_password(mysql_url: str, make_entry: Make) -> None:
    url = sa.make_url(mysql_url).set(username="jm_audit_nobody", password="s3cret-pw")
    store = AuditStore(url.render_as_string(hide_password=False))
    with pytest.raises(AuditStoreRejected, match="check the user, password") as caught:
        store.query()
    assert caught.value.retryable is False
    assert "s3cret-pw" not in str(caught.value)
    store.close()


def test_sqlite_path_that_cannot_be_a_directory_is_not_retryable(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data directory should be")
    with pytest.raises(AuditStoreRejected, match="JOBMEDIC_DATA_DIR") as caught:
        AuditStore(f"sqlite:///{blocker / 'audit.db'}")
    assert caught.value.retryable is False


def test_sqlite_locked_by_another_writer_is_retryable(
    tmp_path: Path, make_entry: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adapters.audit.engine as engine_module

    url = f"sqlite:///{tmp_path / 'audit.db'}"
    AuditStore(url).migrate()
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_S", 0.2)  # do not wait 30 s for the lock
    store = AuditStore(url)
    holder = sa.create_engine(url)
    with holder.connect() as conn:
        conn.exec_driver_sql("BEGIN EXCLUSIVE")
        with pytest.raises(AuditStoreUnavailable, match="locked by another process") as caught:
            store.record(make_entry())
        conn.exec_driver_sql("ROLLBACK")
    assert caught.value.retryable is True
    assert store.record(make_entry()) is True
    holder.dispose()
    store.close()


@pytest.mark.parametrize("url", ["postgresql://db/jobmedic", "not a url"])
def test_unsupported_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError, match="sqlite:///"):
        AuditStore(url)
