"""A floor on write speed, so that a change that makes every record() slow (a lost index, a sleep) fails.

Run with `-s` to see the measured rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from adapters.audit import AuditStore
from workflows.contracts import AuditEntry

# far below what this 2-core machine measures (SQLite ~780/s, MariaDB ~310/s with a commit per record)
FLOOR_PER_S = 25
N = 300


def test_record_rate(
    store: AuditStore, make_entry: Callable[..., AuditEntry], record_property: Callable[..., None]
) -> None:
    store.migrate()
    entries = [make_entry(job_id=str(n), line="x" * 200, implicated_nodes=["node1"]) for n in range(N)]
    start = time.perf_counter()
    for entry in entries:
        assert store.record(entry)
    rate = N / (time.perf_counter() - start)
    record_property("records_per_s", round(rate))
    print(f"\n{store.dialect}: {rate:.0f} records/s")
    assert rate > FLOOR_PER_S
    assert len(store.query()) == N
