"""Renders a Helm chart's templates without `helm`: the subset of Go templates the chart uses, through Jinja2.

No `helm` binary is in the registries this project reaches. The chart's templates
are real Helm templates (`helm install` renders them as they are); this module
translates each action into Jinja2 and renders it with Helm's semantics for the
part the chart uses. Anything outside the subset raises `Unsupported`, so a
template that only real Helm could render fails the tests instead of passing them.

The subset:
- `{{ pipeline }}` and the trim markers `{{-` / `-}}` (Jinja2's `-` trims the same way:
  every whitespace character up to the next non-space, newlines included);
- `{{/* comment */}}`;
- `if` / `else if` / `else` / `end`, `range $v := X`, `range $k, $v := X` (a map is
  walked in key order, as Go does), `define "name"` ... `end` (in `_helpers.tpl`),
  `$x := pipeline` and `$x = pipeline` (not across a `range`);
- operands: `.A.b` (from the dot: the root values, or a `define`'s argument), `$`,
  `$x`, `$x.a.b`, string and integer literals, `true`, `false`, `nil`, `( pipeline )`;
- functions: and or not eq ne empty default required fail quote toJson toYaml
  indent nindent trunc trimSuffix contains hasKey printf urlquery include dict gt int sha256sum replace.
A missing map key reads as nil, as in Helm; a field of nil is an error, as in Helm.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import jinja2
import yaml


class Unsupported(Exception):
    """A template uses Go template syntax outside the subset this renderer implements."""


class RenderError(Exception):
    """`required` or `fail` stopped the rendering, or a field of nil was read (as in Helm)."""


_ACTION = re.compile(r"\{\{(-?)(\s*)(.*?)(\s*)(-?)\}\}", re.DOTALL)
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<num>-?\d+(?:\.\d+)?)
      | (?P<open>\() | (?P<close>\)) | (?P<pipe>\|)
      | (?P<var>\$[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|\$(?:\.[A-Za-z_]\w*)*)
      | (?P<field>(?:\.[A-Za-z_]\w*)+|\.)
      | (?P<ident>[A-Za-z_]\w*)
    )""",
    re.VERBOSE,
)
FUNCTIONS = {
    "and", "or", "not", "eq", "ne", "empty", "default", "required", "fail", "quote", "toJson", "toYaml",
    "indent", "nindent", "trunc", "trimSuffix", "contains", "hasKey", "printf", "urlquery", "include", "dict",
    "gt", "int", "sha256sum", "replace",
}


# ------------------------------------------------------------------------------------ translation


class _Translator:
    def __init__(self) -> None:
        self.stack: list[str] = []

    def template(self, source: str) -> str:
        out: list[str] = []
        pos = 0
        for m in _ACTION.finditer(source):
            out.append(_escape_text(source[pos : m.start()]))
            pos = m.end()
            left, space_l, body, space_r, right = m.groups()
            if (left and not space_l) or (right and not space_r):
                raise Unsupported(f"Go needs a space after '{{{{-' and before '-}}}}': {m.group(0)!r}")
            out.append(self.action(body, left, right))
        out.append(_escape_text(source[pos:]))
        if self.stack:
            raise Unsupported(f"unclosed {self.stack[-1]}")
        return "".join(out)

    def action(self, body: str, left: str, right: str) -> str:
        tag = lambda code: f"{{%{left} {code} {right}%}}"  # noqa: E731
        if body.startswith("/*"):
            if not body.endswith("*/"):
                raise Unsupported(f"a comment must end with '*/': {body!r}")
            return f"{{#{left} comment {right}#}}"
        word, _, rest = body.partition(" ")
        rest = rest.strip()
        if word == "if":
            self.stack.append("if")
            return tag(f"if {self.expr(rest)}")
        if word == "else":
            if rest.startswith("if "):
                self._expect("if", body)
                return tag(f"elif {self.expr(rest[3:])}")
            if rest:
                raise Unsupported(f"else {rest}")
            self._expect("if", body)
            return tag("else")
        if word == "end":
            kind = self.stack.pop() if self.stack else None
            closing = {"if": "endif", "range": "endfor", "define": "endmacro"}.get(kind or "")
            if closing is None:
                raise Unsupported("end without a block")
            return tag(closing)
        if word == "range":
            m = re.fullmatch(r"(\$\w+)\s*(?:,\s*(\$\w+)\s*)?:=\s*(.+)", rest, re.DOTALL)
            if not m:
                raise Unsupported(f"range without variables (the dot would move): {body!r}")
            self.stack.append("range")
            a, b, source = m.groups()
            if b is None:
                return tag(f"for {_var(a)} in _items({self.expr(source)})")
            return tag(f"for {_var(a)}, {_var(b)} in _pairs({self.expr(source)})")
        if word == "define":
            name = json.loads(rest)
            self.stack.append("define")
            return tag(f"macro {_macro(name)}(dot)")
        if word in {"with", "template", "block", "break", "continue"}:
            raise Unsupported(f"{word} is outside the subset")
        m = re.fullmatch(r"(\$\w+)\s*:?=\s*(.+)", body, re.DOTALL)
        if m:
            return tag(f"set {_var(m.group(1))} = {self.expr(m.group(2))}")
        return f"{{{{{left} _out({self.expr(body)}) {right}}}}}"

    def _expect(self, kind: str, body: str) -> None:
        if not self.stack or self.stack[-1] != kind:
            raise Unsupported(f"{body!r} outside an {kind}")

    def expr(self, text: str) -> str:
        tokens = _tokens(text)
        code, rest = self._pipeline(tokens)
        if rest:
            raise Unsupported(f"unexpected {rest[0][1]!r} in {text!r}")
        return code

    def _pipeline(self, tokens: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
        code, tokens = self._command(tokens, piped=None)
        while tokens and tokens[0][0] == "pipe":
            code, tokens = self._command(tokens[1:], piped=code)
        return code, tokens

    def _command(self, tokens: list[tuple[str, str]], *, piped: str | None) -> tuple[str, list[tuple[str, str]]]:
        if not tokens:
            raise Unsupported("empty command")
        kind, value = tokens[0]
        if kind == "ident" and value not in {"true", "false", "nil"}:
            if value not in FUNCTIONS:
                raise Unsupported(f"function {value} is outside the subset")
            args: list[str] = []
            tokens = tokens[1:]
            while tokens and tokens[0][0] not in {"pipe", "close"}:
                arg, tokens = self._operand(tokens)
                args.append(arg)
            if piped is not None:
                args.append(piped)
            if value == "include":
                name = json.loads(_unwrap_literal(args[0]))
                return f"_s({_macro(name)}({args[1]}))", tokens
            return f"_f_{value}({', '.join(args)})", tokens
        if piped is not None:
            raise Unsupported("only a function can follow '|'")
        operand, tokens = self._operand(tokens)
        if tokens and tokens[0][0] not in {"pipe", "close"}:
            raise Unsupported(f"{value!r} is not a function: cannot take arguments")
        return operand, tokens

    def _operand(self, tokens: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
        kind, value = tokens[0]
        tokens = tokens[1:]
        if kind == "open":
            code, tokens = self._pipeline(tokens)
            if not tokens or tokens[0][0] != "close":
                raise Unsupported("unbalanced parenthesis")
            return f"({code})", tokens[1:]
        if kind == "str":
            return repr(json.loads(value)), tokens  # Go's escapes in "..." are JSON's for the chart's strings
        if kind == "num":
            return value, tokens
        if kind == "ident":
            return {"true": "True", "false": "False", "nil": "None"}[value], tokens
        if kind == "field":
            return _chain("dot", value.split(".")[1:] if value != "." else []), tokens
        if kind == "var":
            head, *fields = value.split(".")
            return _chain("dot" if head == "$" else _var(head), fields), tokens
        raise Unsupported(f"unexpected {value!r}")


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise Unsupported(f"cannot read {text[pos:]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _unwrap_literal(code: str) -> str:
    return json.dumps(eval(code, {}))  # our own repr() of a string literal


def _chain(base: str, fields: list[str]) -> str:
    code = base
    for f in fields:
        code = f"_get({code}, {f!r})"
    return code


def _var(name: str) -> str:
    return "v_" + name[1:] if name != "$" else "dot"


def _macro(name: str) -> str:
    return "m_" + re.sub(r"\W", "_", name)


def _escape_text(text: str) -> str:
    """Literal template text, with anything Jinja2 would read as syntax kept literal."""
    if re.search(r"\{[{%#]|[}%#]\}", text):
        return "{{ " + repr(text) + " }}" if text else ""
    return text


# ------------------------------------------------------------------------------------ Helm's functions


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        raise RenderError(f"nil pointer evaluating interface {{}}.{key}")
    if isinstance(obj, dict):
        return obj.get(key)
    raise RenderError(f"cannot read field {key} of {type(obj).__name__}")


def _go_empty(v: Any) -> bool:
    return v is None or v is False or v == 0 or v == "" or (isinstance(v, (list, dict)) and not v)


def _go_str(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        raise RenderError("printing a map or list: use toYaml or toJson")
    return str(v)


def _f_and(*args: Any) -> Any:
    for a in args:
        if _go_empty(a):
            return a
    return args[-1]


def _f_or(*args: Any) -> Any:
    for a in args:
        if not _go_empty(a):
            return a
    return args[-1]


def _f_required(message: str, value: Any) -> Any:
    if value is None or value == "":
        raise RenderError(message)
    return value


def _f_fail(message: str) -> Any:
    raise RenderError(message)


def _f_to_yaml(v: Any) -> str:
    if v is None:
        return "null"
    return yaml.safe_dump(v, sort_keys=True, default_flow_style=False).rstrip("\n")


def _f_indent(n: int, s: str) -> str:
    return "\n".join(" " * n + line for line in s.split("\n"))


def _f_printf(fmt: str, *args: Any) -> str:
    return re.sub(r"%[svdq]", "%s", fmt) % tuple(_go_str(a) for a in args)


def _items(v: Any) -> list[Any]:
    if v is None:
        return []
    return [v[k] for k in sorted(v)] if isinstance(v, dict) else list(v)


def _pairs(v: Any) -> list[tuple[Any, Any]]:
    if v is None:
        return []
    return sorted(v.items()) if isinstance(v, dict) else list(enumerate(v))


GLOBALS: dict[str, Any] = {
    "_get": _get,
    "_out": _go_str,
    "_s": str,
    "_items": _items,
    "_pairs": _pairs,
    "_f_and": _f_and,
    "_f_or": _f_or,
    "_f_not": _go_empty,
    "_f_eq": lambda a, *bs: any(a == b for b in bs),
    "_f_ne": lambda a, b: a != b,
    "_f_empty": _go_empty,
    "_f_default": lambda d, v=None: d if _go_empty(v) else v,
    "_f_required": _f_required,
    "_f_fail": _f_fail,
    "_f_quote": lambda *vs: " ".join(json.dumps(_go_str(v), ensure_ascii=False) for v in vs),
    "_f_toJson": lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")),
    "_f_toYaml": _f_to_yaml,
    "_f_indent": _f_indent,
    "_f_nindent": lambda n, s: "\n" + _f_indent(n, s),
    "_f_trunc": lambda n, s: s[:n],
    "_f_trimSuffix": lambda suffix, s: s[: -len(suffix)] if suffix and s.endswith(suffix) else s,
    "_f_contains": lambda sub, s: sub in s,
    "_f_hasKey": lambda m, k: isinstance(m, dict) and k in m,
    "_f_printf": _f_printf,
    "_f_replace": lambda old, new, s: s.replace(old, new),
    "_f_gt": lambda a, b: a > b,
    "_f_int": int,
    "_f_sha256sum": lambda s: hashlib.sha256(s.encode()).hexdigest(),
    "_f_dict": lambda *kv: dict(zip(kv[::2], kv[1::2])),
    "_f_urlquery": lambda *vs: urllib.parse.quote_plus("".join(_go_str(v) for v in vs)),
}


# -------------------------------------------------------------------------------------- the chart


def merge(base: Any, overlay: Any) -> Any:
    """Helm's merge of `-f`/`--set` values over the chart's: maps deeply, anything else replaced."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = dict(base)
        for key, value in overlay.items():
            merged[key] = merge(base.get(key), value) if key in base else value
        return merged
    return overlay


def render_chart(chart_dir: Path, overrides: dict[str, Any] | None = None, *, release: str = "jm",
                 namespace: str = "ops") -> dict[str, str]:
    """{template name: rendered text} for every manifest template, as `helm template` would print them."""
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    values = merge(yaml.safe_load((chart_dir / "values.yaml").read_text()), overrides or {})
    root = {
        "Values": values,
        "Release": {"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": True},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart.get("appVersion")},
    }
    env = jinja2.Environment(autoescape=False, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.globals.update(GLOBALS)
    templates = chart_dir / "templates"
    helpers = "".join(_Translator().template(p.read_text()) for p in sorted(templates.glob("_*.tpl")))
    rendered: dict[str, str] = {}
    for path in sorted(templates.glob("*.yaml")):
        source = helpers + _Translator().template(path.read_text())
        rendered[path.name] = env.from_string(source).render(dot=root)
    return rendered


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every non-empty YAML document of the rendered templates."""
    docs: list[dict[str, Any]] = []
    for name, text in rendered.items():
        for doc in yaml.safe_load_all(text):
            if doc is None:
                continue
            assert isinstance(doc, dict), f"{name}: a manifest is a mapping, not {type(doc).__name__}"
            docs.append(doc)
    return docs


def value_paths(chart_dir: Path) -> set[str]:
    """Every `.Values.a.b` path the templates read (from the root dot or `$`)."""
    found: set[str] = set()
    for path in (chart_dir / "templates").iterdir():
        for m in re.finditer(r"(?<![\w$])\$?\.Values((?:\.[A-Za-z_]\w*)+)", path.read_text()):
            found.add(m.group(1)[1:])
    return found
