"""Worker threads and prefilters change the screener's speed only: every figure equals the one-thread scan and grep."""

from __future__ import annotations

import io
import re
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from activities.detection.progress import clean_line, parse_progress_line
from activities.detection.screen import PREFILTERS, Screener
from tests.detection.test_screen import FAILURES, PATTERNS, Pat, _grep_flagged, _realistic_lines, _write

property_settings = settings(
    database=None, deadline=None, max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _pair(patterns: list = PATTERNS, **kwargs) -> tuple[Screener, Screener]:
    """One screener that never starts a thread, one that spreads every scan over two."""
    return (
        Screener(patterns, workers=1, **kwargs),
        Screener(patterns, workers=2, parallel_min_bytes=0, **kwargs),
    )


def _threads_seen(monkeypatch: pytest.MonkeyPatch, screener: Screener) -> set[str]:
    """Names of the threads that scan chunks for `screener` (proves the parallel path ran)."""
    seen: set[str] = set()
    find = screener._find

    def spy(*args, **kwargs):
        seen.add(threading.current_thread().name)
        return find(*args, **kwargs)

    monkeypatch.setattr(screener, "_find", spy)
    return seen


def _figures(result) -> str | None:
    return None if result is None else result.model_dump_json()  # JSON, so that a NaN loss equals itself


def _progress_line(it: int) -> str:
    return f" iteration {it:>8}/  100000 | elapsed time per iteration (ms): 500.0 | lm loss: 2.5E+00 |"


# --------------------------------------------------------------------------- threads


@pytest.mark.parametrize("hits_per_pattern", [None, 8])
def test_threads_give_the_one_thread_result_and_grep_lines(
    hits_per_pattern: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _realistic_lines(30000, seed=21)
    for k in range(0, len(lines), 997):
        lines[k] = f"  successfully saved checkpoint from iteration {k:>7} to /ckpt"
    path = _write(tmp_path, lines)
    one, two = _pair(hits_per_pattern=hits_per_pattern)
    seen = _threads_seen(monkeypatch, two)
    for chunk in (4096, 64 * 1024):
        expected = one.scan_file(path, chunk_bytes=chunk)
        got = two.scan_file(path, chunk_bytes=chunk)
        assert _figures(got) == _figures(expected)
        in_memory = two.scan_bytes(path.read_bytes(), chunk_bytes=chunk)
        assert _figures(in_memory) == _figures(one.scan_bytes(path.read_bytes(), chunk_bytes=chunk))
    assert any(name.startswith("screen") for name in seen), seen
    if hits_per_pattern is None:
        assert {h.line_no for h in got.hits} == _grep_flagged(PATTERNS, path, tmp_path)
    else:
        assert got.hits_dropped > 0  # the bounded rings were exercised


def test_stream_without_size_goes_parallel_once_large(monkeypatch: pytest.MonkeyPatch) -> None:
    data = ("\n".join(_realistic_lines(20000, seed=4)) + "\n").encode()
    one = Screener(PATTERNS, workers=1)
    two = Screener(PATTERNS, workers=2, parallel_min_bytes=len(data) // 3)
    seen = _threads_seen(monkeypatch, two)
    got = two.scan_stream(io.BytesIO(data), chunk_bytes=16 * 1024)
    assert _figures(got) == _figures(one.scan_stream(io.BytesIO(data), chunk_bytes=16 * 1024))
    assert "MainThread" in seen and any(name.startswith("screen") for name in seen)


def test_small_inputs_stay_on_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    screener = Screener(PATTERNS, workers=2)  # default threshold: a few chunks
    seen = _threads_seen(monkeypatch, screener)
    screener.scan_bytes(("\n".join(FAILURES) + "\n").encode())
    assert seen == {threading.current_thread().name}


def test_offsets_count_from_the_scan_start_in_every_path(tmp_path: Path) -> None:
    lines = _realistic_lines(8000, seed=8)
    path = _write(tmp_path, lines)
    data = path.read_bytes()
    for screener in _pair():
        for result in (screener.scan_file(path, chunk_bytes=8192), screener.scan_bytes(data, chunk_bytes=8192)):
            assert result.hits
            for hit in result.hits:
                assert data.count(b"\n", 0, hit.offset) == hit.line_no - 1
                assert hit.offset == 0 or data[hit.offset - 1:hit.offset] == b"\n"


def test_an_error_on_a_worker_thread_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    screener = Screener(PATTERNS, workers=2, parallel_min_bytes=0)
    data = ("\n".join(_realistic_lines(5000)) + "\n").encode()
    good = screener.scan_bytes(data, chunk_bytes=4096)
    find = screener._find

    def broken(data, start, end, *args):
        if start > 0:
            raise RuntimeError("scan failed")
        return find(data, start, end, *args)

    monkeypatch.setattr(screener, "_find", broken)
    with pytest.raises(RuntimeError, match="scan failed"):
        screener.scan_bytes(data, chunk_bytes=4096)
    monkeypatch.undo()
    assert _figures(screener.scan_bytes(data, chunk_bytes=4096)) == _figures(good)  # lock and scratch released


# --------------------------------------------------------------------------- awkward lines, every path


def test_crlf_lines_equal_grep_in_every_path(tmp_path: Path) -> None:
    lines = [line + "\r" for line in _realistic_lines(6000, seed=13)]
    path = _write(tmp_path, lines)
    expected = _grep_flagged(PATTERNS, path, tmp_path)
    assert expected
    for screener in _pair(hits_per_pattern=None):
        result = screener.scan_file(path, chunk_bytes=4096)
        assert {h.line_no for h in result.hits} == expected
        assert all(not h.line.endswith("\r") for h in result.hits)
        assert result.newest_progress is not None  # a progress line ending in \r still parses


def test_lines_longer_than_chunks_and_than_the_stream_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    chunk = 4096
    lines = [
        "ok",
        "x" * (chunk + 100) + " RuntimeError: CUDA error: an illegal memory access",  # over one chunk
        "y" * (3 * chunk) + " NVRM: Xid (PCI:0000:3b:00): 79, pid=1",  # over two chunks: screened inline
        _progress_line(7),
        "z" * (40 * chunk) + " CUDA error: device-side assert " + "z" * 100,  # pieces past max_line_bytes
        "node3:1:2 [1] NCCL WARN NET/IB : Got completion with error 12",
        _progress_line(8),
        "tail",
    ]
    data = ("\n".join(lines) + "\n").encode()
    one, two = _pair()
    seen = _threads_seen(monkeypatch, two)
    kwargs = {"chunk_bytes": chunk, "max_line_bytes": 32 * chunk}
    expected = one.scan_stream(io.BytesIO(data), **kwargs)
    got = two.scan_stream(io.BytesIO(data), **kwargs)
    assert _figures(got) == _figures(expected)
    assert any(name.startswith("screen") for name in seen)
    assert got.lines == len(lines)
    assert [(h.pattern_id, h.line_no) for h in got.hits] == [
        ("cuda_error", 2), ("xid", 3), ("cuda_error", 5), ("nccl_warn_error", 6)
    ]
    assert got.newest_progress is not None and (got.newest_progress.iteration, got.newest_progress.line_no) == (8, 7)
    assert _figures(two.scan_bytes(data, chunk_bytes=chunk)) == _figures(one.scan_bytes(data, chunk_bytes=chunk))


# --------------------------------------------------------------------------- property: random logs

_FRAGMENTS = [*FAILURES, "ok", "", "node1:1:1 [0] NCCL INFO chatter", "begin", "finish", "rank 3"]


@st.composite
def _logs(draw) -> tuple[list[str], str]:
    """Random lines: failures, chatter, progress, long runs; random line ends (LF or CRLF)."""
    lines: list[str] = []
    iteration = 0
    for kind in draw(st.lists(st.integers(0, 9), min_size=1, max_size=120)):
        if kind < 5:
            lines.append(draw(st.sampled_from(_FRAGMENTS)))
        elif kind < 8:
            iteration += draw(st.integers(1, 50))
            lines.append(_progress_line(iteration))
        elif kind == 8:
            lines.append("w" * draw(st.integers(1, 9000)) + draw(st.sampled_from(FAILURES)))
        else:
            lines.append(draw(st.text(st.characters(codec="utf-8", exclude_characters="\n0123456789"), max_size=60)))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return lines, ending


def _oracle(patterns: list[Pat], lines: list[bytes]) -> set[tuple[str, int]]:
    """(pattern id, line no) for every pattern that `re` finds on a line on its own (grep's view)."""
    compiled = [(p.id, re.compile(p.regex.encode(), re.IGNORECASE if p.caseless else 0)) for p in patterns]
    return {(pid, no) for no, line in enumerate(lines, 1) for pid, rx in compiled if rx.search(line)}


_SCREENERS = _pair(hits_per_pattern=None)  # compiled once for all examples; scans leave no state


@property_settings
@given(_logs(), st.sampled_from([256, 1024, 4096, 1 << 20]), st.booleans())
def test_random_logs_give_one_result_in_every_path(log: tuple[list[str], str], chunk: int, final_newline: bool) -> None:
    lines, ending = log
    data = ending.join(lines).encode("utf-8", "surrogateescape") + (ending.encode() if final_newline else b"")
    one, two = _SCREENERS
    expected = one.scan_bytes(data, chunk_bytes=chunk)
    assert _figures(two.scan_bytes(data, chunk_bytes=chunk)) == _figures(expected)
    streamed = one.scan_stream(io.BytesIO(data), chunk_bytes=chunk)
    assert _figures(two.scan_stream(io.BytesIO(data), chunk_bytes=chunk)) == _figures(streamed)
    # a stream is cut into chunks where its reads end, so only the per-chunk progress list may differ
    assert streamed.model_dump_json(exclude={"progress"}) == expected.model_dump_json(exclude={"progress"})
    assert _figures(streamed.newest_progress) == _figures(expected.newest_progress)
    raw_lines = data.split(b"\n")
    if data.endswith(b"\n") or not data:
        raw_lines = raw_lines[:-1]
    assert expected.lines == len(raw_lines)
    assert {(h.pattern_id, h.line_no) for h in expected.hits} == _oracle(PATTERNS, raw_lines)
    progress_lines = [
        no for no, line in enumerate(raw_lines, 1)
        if parse_progress_line(clean_line(line.decode("utf-8", "replace"))) is not None
    ]
    if progress_lines:  # read from a chunk's tail, and still the newest line of the log
        assert expected.newest_progress is not None and expected.newest_progress.line_no == progress_lines[-1]
    every = two.scan_bytes(data, chunk_bytes=chunk, progress="all")
    assert [s.line_no for s in every.progress] == progress_lines
    assert _figures(every) == _figures(one.scan_bytes(data, chunk_bytes=chunk, progress="all"))


# --------------------------------------------------------------------------- prefilters


_PREFILTER_IDS = [f"prefilter-{k}" for k in range(len(PREFILTERS))]


@pytest.mark.parametrize(("exact", "prefilter"), sorted(PREFILTERS.items()), ids=_PREFILTER_IDS)
def test_each_prefilter_matches_every_line_its_expression_matches(exact: bytes, prefilter: bytes) -> None:
    rx = re.compile(prefilter)

    @settings(database=None, deadline=None, max_examples=300)
    @given(st.from_regex(exact.decode(), fullmatch=True))
    def check(text: str) -> None:
        line = text.encode("utf-8", "surrogateescape")
        if b"\n" not in line:
            assert rx.search(line), line

    check()


@pytest.mark.parametrize("exact", sorted(PREFILTERS), ids=_PREFILTER_IDS)
def test_prefiltered_expressions_stay_exact(exact: bytes, tmp_path: Path) -> None:
    pattern = Pat("prefiltered", exact.decode())
    lines = [
        "torch.distributed.DistStoreError: timed out",  # matches
        "see torch.Tensor for details",  # the prefilter matches, the expression does not
        "omegaconf.errors.Missing_Key: foo",  # matches
        "x.Y: too short",  # `[A-Za-z0-9_]{1,60}` needs a second letter
        "x.Yz: long enough",  # matches
        "Foo.Bar: uppercase module",  # no lowercase segment
        "  (mod.sub.KeyFault: value)",  # matches after '('
        "a" * 50 + ".Zed: segment over 40",  # matches from a later start inside the run
        "1.Big: digit first",  # a segment may not start with a digit
        "v1.2.Release: notes",  # matches ("v1.2." is two segments)
        "nothing here",
    ] * 50
    path = _write(tmp_path, lines)
    expected = _grep_flagged([pattern], path, tmp_path)
    for screener in _pair([pattern], hits_per_pattern=None):
        assert screener._main.prefiltered == {0}
        assert {h.line_no for h in screener.scan_file(path, chunk_bytes=2048).hits} == expected
    unfiltered = Screener([Pat("same", exact.decode() + "(?:)")], hits_per_pattern=None)  # not a table key
    assert unfiltered._main.prefiltered == frozenset()
    assert {h.line_no for h in unfiltered.scan_file(path).hits} == expected
