"""Whole listings decoded in a child process (adapters/slurm/listing_decoder.py) give exactly what decoding them
here gives, listing after listing, and the decoder fails open when its child dies.

On real Slurm 22.05 output (tests/slurm/data/squeue.json, captured by capture.sh), grown and edited between polls.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
from pathlib import Path

import pytest

from adapters.errors import ParseError, SchedulerUnreachable
from adapters.slurm.listing_decoder import ListingDecoder
from adapters.slurm.parse import parse_squeue_listing

DATA = Path(__file__).parent / "data"


def base_doc() -> dict:
    doc = json.loads((DATA / "squeue.json").read_text())
    template = doc["jobs"][0]
    for i in range(40):  # more jobs than the capture holds, each its own record
        job = copy.deepcopy(template)
        job["job_id"] = 900_000 + i
        job["name"] = f"train-{i}"
        doc["jobs"].append(job)
    return doc


def plain(doc: dict) -> list[dict]:
    return [j.model_dump() for j in parse_squeue_listing(json.dumps(doc), cluster="lab").jobs]


async def decoded(decoder: ListingDecoder, doc: dict) -> list[dict]:
    listing = await decoder.decode(json.dumps(doc), cluster="lab", opt_in_max_bytes=4096)
    return [j.model_dump() for j in listing.jobs]


def with_decoder(body) -> None:
    """Run `body(decoder)` in an event loop with a fresh decoder, closed afterwards."""
    async def run() -> None:
        decoder = ListingDecoder()
        try:
            await body(decoder)
        finally:
            decoder.close()

    asyncio.run(run())


def test_listing_after_listing_the_child_gives_what_decoding_here_gives() -> None:
    async def body(decoder: ListingDecoder) -> None:
        doc = base_doc()
        assert await decoded(decoder, doc) == plain(doc)
        doc["jobs"][3]["restart_cnt"] = 5  # a record that changed
        gone = doc["jobs"].pop(7)  # a job that left
        new = copy.deepcopy(doc["jobs"][0])
        new["job_id"] = 950_001
        doc["jobs"].insert(2, new)  # a job that came, not at the end
        again = await decoded(decoder, doc)
        assert again == plain(doc)
        assert again[4]["restarts"] == 5
        assert str(gone["job_id"]) not in {j["job_id"] for j in again}
        doc["jobs"].append(gone)  # and back again
        assert await decoded(decoder, doc) == plain(doc)
        assert decoder.child_decodes == 3 and decoder.local_decodes == 0

    with_decoder(body)


def test_callers_get_their_own_copies() -> None:
    async def body(decoder: ListingDecoder) -> None:
        doc = base_doc()
        first = await decoder.decode(json.dumps(doc), cluster="lab", opt_in_max_bytes=4096)
        first.jobs[0].cluster = "changed by a caller"
        second = await decoder.decode(json.dumps(doc), cluster="lab", opt_in_max_bytes=4096)
        assert second.jobs[0].cluster == "lab"

    with_decoder(body)


def test_an_unreadable_record_is_skipped_and_a_broken_document_raises_as_here() -> None:
    async def body(decoder: ListingDecoder) -> None:
        doc = base_doc()
        doc["jobs"][1].pop("job_id")
        listing = await decoder.decode(json.dumps(doc), cluster="lab", opt_in_max_bytes=4096)
        assert len(listing.jobs) == len(doc["jobs"]) - 1
        assert ["no job_id" in s.reason for s in listing.skipped] == [True]
        with pytest.raises(ParseError):
            await decoder.decode('{"jobs": [', cluster="lab", opt_in_max_bytes=4096)
        with pytest.raises(SchedulerUnreachable):
            await decoder.decode('{"errors": [{"error": "Unable to contact slurm controller"}], "jobs": []}',
                                 cluster="lab", opt_in_max_bytes=4096)
        assert await decoded(decoder, base_doc()) == plain(base_doc())  # and it goes on after them

    with_decoder(body)


def test_a_dead_child_costs_one_listing_decoded_here_and_the_next_child_starts_afresh() -> None:
    async def body(decoder: ListingDecoder) -> None:
        doc = base_doc()
        assert await decoded(decoder, doc) == plain(doc)
        pid = await decoder.child_pid()
        assert pid is not None and pid != os.getpid()
        os.kill(pid, signal.SIGKILL)
        doc["jobs"][5]["restart_cnt"] = 9
        assert await decoded(decoder, doc) == plain(doc)  # the listing is not lost
        assert decoder.local_decodes == 1
        doc["jobs"][6]["restart_cnt"] = 3
        assert await decoded(decoder, doc) == plain(doc)  # a new child, which knows nothing of the old one's
        assert decoder.child_decodes == 2
        assert await decoder.child_pid() not in (None, pid)

    with_decoder(body)


def test_in_child_false_decodes_here() -> None:
    async def run() -> None:
        decoder = ListingDecoder(in_child=False)
        doc = base_doc()
        assert await decoded(decoder, doc) == plain(doc)
        assert (decoder.child_decodes, decoder.local_decodes) == (0, 1)
        assert await decoder.child_pid() is None

    asyncio.run(run())
