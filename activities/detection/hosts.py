"""Which cluster node a name in a log line means: node names, addresses, FQDNs, IP peers.

Logs name nodes every way there is: the Slurm node name (`gpu-b17`), its fully
qualified host name (`gpu-b17.hpc.example.org`, syslog and cloud notices), its
address (`10.20.1.17`, NCCL socket and IB peers, Ray's `ip=` prefix, often with a
port as `10.20.1.17:29500` or `10.20.1.17<45123>`), or an upper-case or
`ip-10-20-1-17` cloud form. `NodeMap` folds all of them onto the node name, from
what Slurm says of each node (`NodeName`, `NodeAddr`, `NodeHostName`).

Pure code, no I/O. A name the map does not know stays as written, so an offline
analysis without a node map still names the IP or host the log gave.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from workflows.contracts import NodeInfo

_TOKEN_SPLIT = re.compile(r"[^A-Za-z0-9._-]+")
_IPV4 = re.compile(r"^(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})(?:\.(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})){3}$")
# cloud host names that spell the address: ip-10-0-3-44 (AWS), 10-0-3-44
_DASHED_IP = re.compile(r"^(?:ip-)?([0-9]{1,3})-([0-9]{1,3})-([0-9]{1,3})-([0-9]{1,3})(?:\..*)?$")
MAX_TOKENS = 400  # tokens of one line looked up (a line is at most 16 KiB here)
_ANY_IP = re.compile(
    r"(?<![0-9.])((?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})(?:\.(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})){3})(?![0-9]|\.[0-9])"
)


def is_ip(token: str) -> bool:
    return bool(_IPV4.match(token))


@dataclass
class NodeMap:
    """Every spelling of every known node -> its Slurm node name."""

    aliases: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, names: Iterable[str] = (), nodes: Iterable[NodeInfo] = ()) -> NodeMap:
        out = cls()
        for name in names:
            out.add(name)
        for node in nodes:
            out.add(node.name, node.addr, node.hostname)
        return out

    def add(self, name: str, *spellings: str) -> None:
        if not name:
            return
        for spelling in (name, *spellings):
            if not spelling or spelling in ("localhost", "127.0.0.1"):
                continue  # a lab's shared loopback address names no node in particular
            for key in _keys(spelling):
                self.aliases.setdefault(key, name)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.aliases.values())

    def __bool__(self) -> bool:
        return bool(self.aliases)

    def resolve(self, token: str | None) -> str | None:
        """The node `token` names, or None when the map does not know it."""
        if not token:
            return None
        token = token.strip().rstrip(".")
        for key in _keys(token):
            hit = self.aliases.get(key)
            if hit is not None:
                return hit
        return None

    def normalise(self, token: str | None) -> str | None:
        """The node name for `token` when known, else `token` itself (an IP without its port)."""
        if not token:
            return None
        hit = self.resolve(token)
        if hit is not None:
            return hit
        bare = strip_port(token.strip())
        return bare or None

    def mentioned(self, text: str) -> list[str]:
        """Known nodes named anywhere in `text`, in order of first mention."""
        if not self.aliases:
            return []
        out: list[str] = []
        for token in _TOKEN_SPLIT.split(text[:16384], maxsplit=MAX_TOKENS)[:MAX_TOKENS]:
            token = token.strip(".-_")
            if len(token) < 2:
                continue
            hit = self.resolve(token)
            if hit is not None and hit not in out:
                out.append(hit)
        return out


def mentioned_ips(text: str) -> list[str]:
    """IPv4 addresses in `text` (an offline analysis names a peer by address when nothing maps it)."""
    out: list[str] = []
    for m in _ANY_IP.finditer(text[:16384]):
        ip = m.group(1)
        before = text[max(0, m.start() - 12):m.start()].lower()
        if "version" in before or before.endswith(("v", "nccl ")) or ip.endswith(".0"):
            continue  # "NCCL version 2.18.1.0", a network address
        if ip not in out and not ip.startswith(("0.", "127.", "255.")):
            out.append(ip)
    return out


def strip_port(token: str) -> str:
    """`10.0.0.5:29500`, `10.0.0.5<45123>`, `[10.0.0.5]:22` -> `10.0.0.5`; other tokens unchanged."""
    token = token.strip("[]")
    if "<" in token:
        token = token.split("<", 1)[0]
    head, sep, tail = token.rpartition(":")
    if sep and tail.isdigit() and (is_ip(head) or "." in head or head.isalnum()):
        token = head.strip("[]")
    return token


def _keys(spelling: str) -> list[str]:
    """The lookup keys of one spelling: itself, lower case, without port, short form, dashed IP."""
    spelling = strip_port(spelling.strip().rstrip("."))
    if not spelling:
        return []
    keys = [spelling, spelling.lower()]
    if not is_ip(spelling) and "." in spelling:
        short = spelling.split(".", 1)[0]
        if short and not short.isdigit():
            keys += [short, short.lower()]
    m = _DASHED_IP.match(spelling)
    if m:
        keys.append(".".join(m.groups()))
    return list(dict.fromkeys(keys))
