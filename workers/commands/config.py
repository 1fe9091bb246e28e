"""`jobmedic config show`: the effective settings, secrets masked."""

from __future__ import annotations

import argparse
import json

from workers.settings import Settings, masked_dump


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("config", help="show the effective configuration")
    inner = parser.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    show = inner.add_parser("show", help="print the effective settings as JSON (secrets masked)")
    show.set_defaults(handler=show_config)


def show_config(args: argparse.Namespace, settings: Settings) -> int:
    print(json.dumps(masked_dump(settings), indent=2, sort_keys=False))
    return 0
