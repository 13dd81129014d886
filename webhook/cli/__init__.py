"""The `gangkeeper` command: one module per subcommand (serve, mutate, controller, release-all, explain,
simulate, certs), each with its options (`add`) and what it runs (`run`); options.py holds what they share."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook import __version__
from webhook.cli import certs, controller, explain, mutate, release_all, serve, simulate

# in the order --help lists them
SUBCOMMANDS = (serve, mutate, controller, release_all, explain, simulate, certs)


class _Defaults(argparse.HelpFormatter):
    """Every option's default in --help, with or without a help text of its own."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text
        if shown and action.option_strings:
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gangkeeper",
        description="All-or-nothing scheduling for Kubernetes workloads, without rewriting manifests.",
    )
    parser.add_argument("--version", action="version", version=f"gangkeeper {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, **options: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, formatter_class=_Defaults, **options)

    for subcommand in SUBCOMMANDS:
        subcommand.add(command)
    for choice in sub.choices.values():  # argparse shows nothing for an option without help text
        for action in choice._actions:
            if action.help is None and action.option_strings and action.default not in (None, False):
                action.help = "(default: %(default)s)"
    return parser


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(found.choices)


def main(argv: list[str] | None = None) -> int:
    from webhook import config

    parser = build_parser()
    try:
        argv = config.expand(sys.argv[1:] if argv is None else argv, _commands(parser))
    except config.ConfigError as error:
        print(f"gangkeeper: {error}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if getattr(args, "max_gang_pods", None) is not None:
        from webhook.gangs import limits

        limits.set_max_gang_pods(args.max_gang_pods)
    try:
        return int(args.func(args))
    except Exception as error:
        # a missing kubeconfig or an API refusal is the user's to fix, not a traceback to read
        from kubernetes.config import ConfigException

        from webhook.kube import ApiError

        if isinstance(error, ConfigException | FileNotFoundError) and args.command in (
            "explain",
            "certs",
            "controller",
            "release-all",
        ):
            print(
                f"gangkeeper {args.command}: no cluster to talk to ({error}); set KUBECONFIG or --kubeconfig",
                file=sys.stderr,
            )
            return 2
        if isinstance(error, ApiError) and error.unreachable:
            print(f"gangkeeper {args.command}: {error.unreachable}", file=sys.stderr)
            return 2
        if isinstance(error, ApiError):
            hint = " (explain lists pods and nodes cluster-wide)" if error.status == 403 else ""
            print(f"gangkeeper {args.command}: the API server refused: {error}{hint}", file=sys.stderr)
            return 1
        raise
