"""The `jobmedic` command line.

Each subcommand lives in its own module under `workers/commands/` and registers
itself through `register(subparsers)`; its handler takes `(args, settings)` and
returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from adapters.errors import ConfigError, JobmedicError
from workers.logs import configure_logging
from workers.settings import load_settings

# module names under workers/commands, in the order `--help` lists them
COMMANDS = ["config", "slurm", "recovery", "release", "demo", "audit", "timeline", "analyze", "report", "scorecard", "check", "notify", "simulate"]
# commands slurmctld runs (EpilogSlurmctld, strigger) and waits for: they load only themselves
FAST_COMMANDS = {"notify"}


def build_parser(*, only: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobmedic",
        description=(
            "Keeps distributed training jobs on Slurm running: detect, attribute, "
            "isolate, restart or stop. Monitor mode is the default."
        ),
    )
    _add_global_options(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in only or COMMANDS:
        importlib.import_module(f"workers.commands.{name}").register(sub)
    for command in _subcommands(parser):
        # also after the subcommand (`jobmedic config show --config F`); SUPPRESS: an option given
        # before the subcommand is not overwritten by the subcommand's own default
        _add_global_options(command, default=argparse.SUPPRESS)
    return parser


def _add_global_options(parser: argparse.ArgumentParser, *, default: object) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=default,
        help="TOML settings file (default: $JOBMEDIC_CONFIG, else the embedded defaults)",
    )
    parser.add_argument("--log-level", default=default, help="DEBUG, INFO, WARNING or ERROR (default: INFO)")


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below `parser`, at any depth (`config`, `config show`, ...)."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk over subparsers
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                found += [child, *_subcommands(child)]
    return found


def _fast_command(argv: list[str]) -> list[str] | None:
    """[the command] when it is one of FAST_COMMANDS (global options may come first), else None."""
    words = iter(argv)
    for word in words:
        if word in ("--config", "--log-level"):
            next(words, None)
        elif not word.startswith("-"):
            return [word] if word in FAST_COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(only=_fast_command(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"jobmedic: {exc}", file=sys.stderr)
        on_error = getattr(args, "on_config_error", None)  # `notify` exits 0: slurmctld must not see our errors
        return on_error(args) if on_error else 2
    configure_logging(args.log_level or settings.log_level)
    try:
        return int(args.handler(args, settings) or 0)
    except JobmedicError as exc:
        print(f"jobmedic: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def run() -> None:
    """Console entry point.

    Exits without interpreter finalization: the Temporal SDK's native runtime
    threads can call into Python while it shuts down and abort the process
    (exit 134) after the command already succeeded.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None when started with the descriptor closed (slurmctld's strigger programs)
            try:
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed or broken pipe: nothing left to tell, the exit code still stands
    os._exit(code)


if __name__ == "__main__":
    run()
