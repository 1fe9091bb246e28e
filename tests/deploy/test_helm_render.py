"""The Go-template subset renderer behind the chart tests follows Helm where the chart relies on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.helm_render import RenderError, Unsupported, render_chart


def chart(tmp_path: Path, template: str, values: str = "a: {b: 1}\n", helpers: str = "") -> str:
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: t\nversion: 1.0.0\nappVersion: '2'\n")
    (tmp_path / "values.yaml").write_text(values)
    (tmp_path / "templates" / "t.yaml").write_text(template)
    if helpers:
        (tmp_path / "templates" / "_helpers.tpl").write_text(helpers)
    return render_chart(tmp_path)["t.yaml"]


def test_trim_markers_eat_newlines_as_go_does(tmp_path: Path) -> None:
    assert chart(tmp_path, "x:\n  {{- if .Values.a }}\n  y\n  {{- end }}\nz\n") == "x:\n  y\nz\n"


def test_a_missing_key_is_nil_a_field_of_nil_is_an_error(tmp_path: Path) -> None:
    assert chart(tmp_path, "[{{ .Values.nope }}][{{ default 7 .Values.a.nope }}]") == "[][7]"
    with pytest.raises(RenderError, match="nil pointer"):
        chart(tmp_path, "{{ .Values.nope.deeper }}")


def test_go_printing_and_emptiness(tmp_path: Path) -> None:
    values = "t: true\nf: false\nz: 0\nn: 1.5\ns: ''\nm: {b: 2, a: 1}\n"
    out = chart(tmp_path, "{{ .Values.t }} {{ default 9 .Values.f }} {{ default 9 .Values.z }} {{ .Values.n }} "
                "{{ .Values.s | quote }} {{ range $k, $v := .Values.m }}{{ $k }}={{ $v }};{{ end }}", values)
    assert out == 'true 9 9 1.5 "" a=1;b=2;'


def test_defines_and_include_with_nindent(tmp_path: Path) -> None:
    helpers = '{{- define "t.labels" -}}\nname: {{ .Chart.Name }}\nv: {{ .Chart.AppVersion | quote }}\n{{- end -}}\n'
    assert chart(tmp_path, "m:\n  {{- include \"t.labels\" . | nindent 2 }}\n", helpers=helpers) == 'm:\n  name: t\n  v: "2"\n'


@pytest.mark.parametrize("template", ["{{ with .Values.a }}{{ .b }}{{ end }}", "{{ range .Values.a }}{{ end }}",
                                      "{{ lookup \"v1\" \"Secret\" \"ns\" \"n\" }}", "{{-.Values.a}}"])
def test_anything_outside_the_subset_is_refused(tmp_path: Path, template: str) -> None:
    with pytest.raises(Unsupported):
        chart(tmp_path, template)
