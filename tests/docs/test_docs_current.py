"""The generated parts of the docs match what `workers.docs_gen` renders from the code."""

from __future__ import annotations

import difflib

import pytest

from workers import docs_gen

REGENERATE_HINT = f"run `{docs_gen.REGENERATE}` from the repository root (venv active) and commit the result"


@pytest.mark.parametrize("doc", sorted(docs_gen.DOCS))
def test_checked_in_doc_is_what_the_generator_renders(doc):
    path = docs_gen.REPO / doc
    current = path.read_text(encoding="utf-8")
    rendered = docs_gen.render_doc(current, expected=docs_gen.DOCS[doc])
    if rendered != current:
        diff = "".join(difflib.unified_diff(current.splitlines(True), rendered.splitlines(True),
                                            f"{doc} (checked in)", f"{doc} (rendered)", n=1))
        pytest.fail(f"{doc} is out of date with the code it documents; {REGENERATE_HINT}\n{diff[:4000]}")


def test_every_setting_and_opt_in_field_has_a_meaning():
    missing = docs_gen.undocumented()
    assert not missing, (
        "no meaning to print for: " + ", ".join(missing)
        + "; give the field a `description=` or add it to SETTING_MEANINGS / OPT_IN_MEANINGS in "
        + f"workers/docs_gen.py, then {REGENERATE_HINT}"
    )


def test_the_settings_table_lists_every_key_of_the_model():
    from workers.settings import Settings

    documented = {row.path for section in docs_gen.settings_sections() for row in section.rows}
    sections = {section.path for section in docs_gen.settings_sections()}

    def leaves(model, prefix=""):
        for name, field in model.model_fields.items():
            key = f"{prefix}{name}"
            section, _ = docs_gen._section_of(field.annotation)
            if section is None:
                yield key
            else:
                assert key in sections
                yield from leaves(section, key + ".")

    assert set(leaves(Settings)) == documented
    assert {"clusters.policy.max_attempts", "clusters.scheduler.ssh.known_hosts", "temporal.address"} <= documented


def test_the_opt_in_reference_names_both_keys_and_every_field():
    from adapters.slurm.optin import KEYS
    from workflows.contracts import OptIn

    text = docs_gen.opt_in_reference()
    assert all(f"`{key}`" in text for key in KEYS)
    for name in OptIn.model_fields:
        if name != "key":
            assert f"| `{name}` |" in text


def test_the_failure_pattern_reference_has_every_pattern_and_xid():
    from activities.detection.catalogue import load_catalogue
    from activities.detection.xid import XIDS

    text = docs_gen.failure_pattern_reference()
    assert all(f"| `{p.id}` |" in text for p in load_catalogue().patterns)
    xids = docs_gen.xid_table()
    assert all(f"| {code} |" in xids for code in XIDS)


def test_a_stale_block_is_rewritten_and_an_unknown_or_missing_one_is_refused():
    stale = f"intro\n{docs_gen.begin_marker('xid')}\nold table\n{docs_gen.end_marker('xid')}\noutro\n"
    rendered = docs_gen.render_doc(stale, expected=("xid",))
    assert rendered.startswith("intro\n") and rendered.endswith("outro\n")
    assert "old table" not in rendered and "| 79 |" in rendered
    assert docs_gen.render_doc(rendered, expected=("xid",)) == rendered
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        docs_gen.render_doc("<!-- BEGIN GENERATED nope: x -->\n<!-- END GENERATED nope -->")
    with pytest.raises(ValueError, match="no generated block settings"):
        docs_gen.render_doc("no markers here", expected=("settings",))


def test_check_mode_reports_stale_docs_with_the_command(tmp_path, monkeypatch, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text(f"{docs_gen.begin_marker('xid')}\n{docs_gen.end_marker('xid')}\n")
    monkeypatch.setattr(docs_gen, "REPO", tmp_path)
    monkeypatch.setattr(docs_gen, "DOCS", {"docs/x.md": ("xid",)})
    assert docs_gen.main(["--check"]) == 1
    assert f"docs/x.md: out of date; run `{docs_gen.REGENERATE}`" in capsys.readouterr().out
    assert docs_gen.main([]) == 0
    assert docs_gen.main(["--check"]) == 0
