"""A listing with one unreadable record: that record is skipped and named, every other job is read.

On real Slurm 22.05 output (tests/slurm/data/squeue.json, captured by capture.sh) with one record damaged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.errors import ParseError
from adapters.slurm.parse import parse_squeue_json, parse_squeue_listing, raw_identity

DATA = Path(__file__).parent / "data"


def damaged(how) -> tuple[str, int]:
    doc = json.loads((DATA / "squeue.json").read_text())
    assert len(doc["jobs"]) >= 3
    how(doc["jobs"])
    return json.dumps(doc), len(doc["jobs"])


@pytest.mark.parametrize("damage, reason", [
    (lambda jobs: jobs[1].pop("job_id"), "no job_id"),
    (lambda jobs: jobs.insert(1, "not a record"), "not an object"),
    (lambda jobs: jobs[1].update(restart_cnt="many", job_id=-4), "no job_id"),
])
def test_one_unreadable_record_is_skipped_and_the_rest_are_read(damage, reason) -> None:
    text, total = damaged(damage)
    listing = parse_squeue_listing(text, cluster="lab")
    assert len(listing.jobs) == total - 1
    assert [reason in s.reason for s in listing.skipped] == [True]
    assert listing.skipped[0].excerpt
    with pytest.raises(ParseError):  # the strict parser still refuses the document
        parse_squeue_json(text)


def test_a_broken_document_still_raises() -> None:
    with pytest.raises(ParseError):
        parse_squeue_listing('{"jobs": [')


def test_only_converts_the_records_asked_for() -> None:
    text, _ = damaged(lambda jobs: jobs[0].pop("job_id"))  # a broken record of another job: not even looked at
    doc = json.loads(text)
    wanted = raw_identity(doc["jobs"][2])
    listing = parse_squeue_listing(text, only=lambda ident: ident == wanted)
    assert [j.job_id for j in listing.jobs] == [wanted] and listing.skipped == []


def test_a_memo_converts_only_the_records_that_changed_and_gives_the_same_jobs(monkeypatch) -> None:
    """Polls of a listing that barely changes: unchanged records are not converted again, and every job read
    through the memo equals the job read without it (a changed record, a new one, one gone)."""
    import adapters.slurm.parse as parse

    from adapters.slurm.parse import ListingMemo

    doc = json.loads((DATA / "squeue.json").read_text())
    converted: list[str] = []
    real = parse.job_from_json

    def counting(raw, **kw):
        converted.append(raw_identity(raw))
        return real(raw, **kw)

    monkeypatch.setattr(parse, "job_from_json", counting)
    memo = ListingMemo()
    first = parse_squeue_listing(json.dumps(doc), cluster="lab", memo=memo)
    assert len(converted) == len(doc["jobs"]) >= 3
    converted.clear()
    first.jobs[0].cluster = "changed by a caller"  # callers get their own copies
    changed = raw_identity(doc["jobs"][1])
    doc["jobs"][1]["restart_cnt"] = 7
    gone = raw_identity(doc["jobs"].pop(2))
    again = parse_squeue_listing(json.dumps(doc), cluster="lab", memo=memo)
    assert converted == [changed]  # only the record that changed
    plain = parse_squeue_listing(json.dumps(doc), cluster="lab")
    assert [j.model_dump() for j in again.jobs] == [j.model_dump() for j in plain.jobs]
    assert again.jobs[1].restarts == 7 and again.jobs[0].cluster == "lab"
    assert gone not in memo.records and len(memo.records) == len(doc["jobs"])
