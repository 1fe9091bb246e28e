"""Subcommands of the `jobmedic` command line; each module has `register(subparsers)`."""
