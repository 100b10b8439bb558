"""Benchmarks: `tao bench ...` commands that print JSON and a table (harness.bench.report)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from harness.errors import UsageError
from harness.shutdown import terminate_as_interrupt


def dump(result: dict[str, Any]) -> str:
    """The result as indented JSON."""
    return json.dumps(result, indent=2)


def run_module(prog: str, add_arguments: Callable[[argparse.ArgumentParser], None],
               command: Callable[[argparse.Namespace], int], argv: list[str] | None) -> int:
    """`python -m <prog> ...`: parse `argv` with the command's options and run it; a usage error exits with 2."""
    parser = argparse.ArgumentParser(prog=prog)
    add_arguments(parser)
    args = parser.parse_args(argv)
    terminate_as_interrupt()
    try:
        return command(args)
    except UsageError as exc:
        print(f"tao: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tao: interrupted", file=sys.stderr)
        return 130
