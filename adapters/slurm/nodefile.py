"""A node map from a file, for offline analysis: which names, addresses and FQDNs are which node.

Accepted, recognised by content:
- JSON: `sinfo --json` (`{"nodes": [...]}`), what `jobmedic slurm nodes --json` prints (a list,
  or one object per line), or any list of `{"name", "addr"|"address", "hostname"}` objects;
- `scontrol show node` text, plain or `-o` (NodeName=, NodeAddr=, NodeHostName=);
- plain text: one node per line, `NAME [ADDRESS [HOSTNAME]]`, `#` starts a comment.
A line or record that fits none raises ParseError naming it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from adapters.errors import ParseError
from adapters.slurm.parse import node_from_json, parse_scontrol_record
from workflows.contracts import NodeInfo

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def parse_node_file(text: str) -> list[NodeInfo]:
    """Every node the file describes, each once, in file order."""
    stripped = text.strip()
    if not stripped:
        return []
    if stripped[0] in "[{":
        nodes = _from_json(stripped)
    elif "NodeName=" in stripped:
        nodes = _from_scontrol(stripped)
    else:
        nodes = _from_plain(stripped)
    seen: dict[str, NodeInfo] = {}
    for node in nodes:
        seen.setdefault(node.name, node)
    return list(seen.values())


def _from_json(text: str) -> list[NodeInfo]:
    try:
        docs: list[Any] = [json.loads(text)]
    except json.JSONDecodeError:
        try:
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ParseError(f"not JSON ({exc.msg} at line {exc.lineno})", line=text[:200]) from exc
    records: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("nodes"), list):
            records += doc["nodes"]
        elif isinstance(doc, list):
            records += doc
        else:
            records.append(doc)
    return [_from_record(r) for r in records]


def _from_record(raw: Any) -> NodeInfo:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ParseError("a node entry needs a \"name\"", line=json.dumps(raw)[:200])
    if "address" in raw or "state_flags" in raw:  # sinfo --json's own record
        return node_from_json(raw)
    return NodeInfo(name=raw["name"], addr=str(raw.get("addr") or ""), hostname=str(raw.get("hostname") or ""))


def _from_scontrol(text: str) -> list[NodeInfo]:
    out = []
    for chunk in re.split(r"(?=(?:^|\s)NodeName=)", text):
        if "NodeName=" not in chunk:
            continue
        fields = parse_scontrol_record(chunk)
        name = fields.get("NodeName", "")
        if not _NAME.match(name):
            raise ParseError("scontrol record without a usable NodeName", line=chunk.strip()[:200])
        out.append(NodeInfo(name=name, addr=fields.get("NodeAddr", ""), hostname=fields.get("NodeHostName", "")))
    return out


def _from_plain(text: str) -> list[NodeInfo]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 3 or not all(_NAME.match(w) for w in words):
            raise ParseError(f"line {number}: expected NAME [ADDRESS [HOSTNAME]]", line=line[:200])
        out.append(NodeInfo(name=words[0], addr=words[1] if len(words) > 1 else "",
                            hostname=words[2] if len(words) > 2 else ""))
    return out
