"""`jobmedic simulate` end to end through the real command line: output shape, the cluster's policy, errors."""

from __future__ import annotations

import json
import re
from dataclasses import fields

import pytest

from workers.cli import main
from workers.simulation.engine import SimConfig, option


@pytest.fixture(autouse=True)
def _no_config_file(monkeypatch):
    monkeypatch.delenv("JOBMEDIC_CONFIG", raising=False)


def run(capsys, *argv: str) -> tuple[str, dict]:
    assert main(["simulate", *argv]) == 0
    out = capsys.readouterr().out
    return out, json.loads(out.strip().splitlines()[-1])


def test_table_html_and_one_json_object_last(capsys, tmp_path):
    page = tmp_path / "goodput.html"
    out, figures = run(capsys, "--quick", "--sizes", "64,4096", "--days", "2", "--html", str(page))
    assert re.search(r"^4,096 +\d", out, re.M)
    assert set(figures["sizes"]) == {"64", "4096"}
    big = figures["sizes"]["4096"]
    for strategy in ("jobmedic", "manual", "requeue"):
        assert 0 < big[strategy]["ettr"] <= 1
    assert big["ettr_ratio_vs_manual"] == pytest.approx(big["jobmedic"]["ettr"] / big["manual"]["ettr"], rel=1e-5)
    assert big["lost_ratio_vs_requeue"] == pytest.approx(
        big["jobmedic"]["gpu_hours_lost_per_week"] / big["requeue"]["gpu_hours_lost_per_week"], rel=1e-5)
    text = page.read_text()
    assert text.count("<svg") == 2
    assert not re.search(r"(src|href)=", text)  # self-contained: nothing fetched
    assert "jobmedic" in text and "requeue" in text


def test_json_only_and_the_same_seed_gives_the_same_figures(capsys):
    _, one = run(capsys, "--json", "--quick", "--sizes", "512", "--seed", "3")
    out, two = run(capsys, "--json", "--quick", "--sizes", "512", "--seed", "3")
    assert len(out.strip().splitlines()) == 1
    one.pop("elapsed_s"), two.pop("elapsed_s")
    assert one == two


def test_the_configured_clusters_policy_decides(capsys, tmp_path, monkeypatch):
    config = tmp_path / "jobmedic.toml"
    config.write_text('[[clusters]]\nname = "tight"\n[clusters.policy]\nmax_attempts = 1\n')
    _, figures = run(capsys, "--config", str(config), "--cluster", "tight", "--quick", "--sizes", "4096", "--json")
    jm = figures["sizes"]["4096"]["jobmedic"]
    assert jm["failures_per_week"] > 0
    assert jm["stops_per_week"] == pytest.approx(jm["failures_per_week"])
    assert set(jm["rules"]) == {"attempt_budget"}
    assert figures["config"]["policy"]["max_attempts"] == 1


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--gpus-per-node", "0"], "--gpus-per-node"),
        (["--sizes", "8,x"], "--sizes"),
        (["--sizes", "0"], "--sizes"),
        (["--days", "400"], "--days"),
        (["--triage-min-s", "7200", "--triage-max-s", "60"], "--triage-min-s"),
        (["--runs", "0"], "--runs"),
        (["--preset", "summit"], "--preset"),
        (["--checkpoint-write-s", "fast"], "--checkpoint-write-s"),
    ],
)
def test_bad_input_is_one_line_naming_the_option(capsys, argv, named):
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--quick", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and err[0].startswith("jobmedic simulate: ")


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    for f in fields(SimConfig):
        if f.name not in ("gpus", "policy"):
            assert re.search(re.escape(option(f.name)) + r" [A-Z]+ \w", text), option(f.name)
    for flag in ("--sizes", "--runs", "--seed", "--quick", "--preset", "--cluster", "--html", "--json"):
        assert flag in text
