"""The command that runs an instance's tests when grading: --eval-command, else the one the official
harness runs for that instance, else pytest on the test ids.

swebench 5 keeps no table of test commands by repository and version: each dataset row carries its own
`eval_script` (the eval.sh the Docker harness runs), in which the test command is the part between the
package's start and end markers, with the instance's test files or modules already named. Tao runs that
part alone, in the worktree; the rest of the script (conda, installs, locale exports, the reset and
`git apply` of test_patch, which Tao does itself) is the image's setup and is left out.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from harness.errors import UsageError
from harness.swebench import official
from harness.swebench.instances import Instance

# The package's Python parsers that read a runner of its own rather than `pytest -rA`; every other Python parser
# reads pytest's lines, so pytest on the test ids is a fair stand-in where a row has no eval_script.
OWN_RUNNER_PARSERS = frozenset({"parse_log_django", "parse_log_sympy"})


class Source(Enum):
    """Where an instance's test command comes from, in the order they are tried."""

    GIVEN = "--eval-command"  # the test ids go after it
    EVAL_SCRIPT = "eval_script"  # names its tests itself
    PYTEST = "pytest"  # on the test ids, in the worktree's Python


@dataclass(frozen=True)
class EvalCommand:
    """How one instance's tests run: the command (empty for pytest, whose interpreter script() picks in the
    worktree) and where it came from."""

    command: str
    source: Source


def official_command(instance: Instance) -> str | None:
    """The test command of the instance's eval_script (the lines between the package's markers), or None
    when the row has no eval_script."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE_VAR
    from swebench.harness.utils import parse_eval_script

    script = instance.extra.get("eval_script")
    if not script:
        return None
    lines = parse_eval_script(str(script))
    starts = [n for n, line in enumerate(lines) if START_TEST_OUTPUT in line]  # the last: test_patch comes before
    ends = [n for n, line in enumerate(lines) if END_TEST_OUTPUT in line and starts and n > starts[-1]]
    between = lines[starts[-1] + 1:ends[0]] if ends else []
    body = [line for line in between if line.strip() and not line.startswith(f"{TEST_EXIT_CODE_VAR}=")]
    if not body:
        raise UsageError(f"instance {instance.instance_id}: its eval_script has no test command between "
                         f"{START_TEST_OUTPUT!r} and {END_TEST_OUTPUT!r}, where the official harness's eval scripts "
                         "put it; fix the row's eval_script or pass --eval-command")
    return "\n".join(body)


def runs_pytest(instance: Instance) -> bool:
    """Whether the package reads this instance's test log as pytest output (so pytest on the ids can stand in)."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    parser = PARSER_REGISTRY[official.log_parser(instance)]
    return parser.__module__.endswith(".python") and parser.__name__ not in OWN_RUNNER_PARSERS


def choose(instance: Instance, given: str | None) -> EvalCommand:
    """The instance's test command; UsageError when there is none to run (the row names no eval_script and
    its repository's runner is not pytest)."""
    if given:
        return EvalCommand(given, Source.GIVEN)
    if (official_line := official_command(instance)) is not None:
        return EvalCommand(official_line, Source.EVAL_SCRIPT)
    if runs_pytest(instance):
        return EvalCommand("", Source.PYTEST)
    raise UsageError(
        f"instance {instance.instance_id} ({instance.repo}): no test command to grade it with. Its row has no "
        f"eval_script, and the package reads its tests with {official.log_parser(instance)}, which is not "
        "pytest's output. swebench 5 holds each instance's test command in the dataset's eval_script column "
        "(the datasets its harness grades, e.g. SWE-bench/SWE-bench_Verified, carry one); use rows with it, "
        "or pass --eval-command with a command that runs this repository's tests given the test ids")


def check(instances: Iterable[Instance], given: str | None) -> None:
    """Before a batch grades: every instance has a test command."""
    for instance in instances:
        choose(instance, given)


def default_pytest(tree: Path) -> str:
    """pytest with a line per test (-rA) under the worktree's .venv if it has one, else this Python."""
    venv = tree / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else shlex.quote(sys.executable)
    return f"{python} -m pytest -rA -p no:cacheprovider"


def script(command: EvalCommand, tree: Path, tests: list[str]) -> str:
    """The bash script that runs the tests: the test ids after a command that takes them; an eval_script's
    command under `set -uo pipefail`, as the official eval script runs it."""
    if command.source is Source.EVAL_SCRIPT:
        return f"set -uo pipefail\n{command.command}"
    line = default_pytest(tree) if command.source is Source.PYTEST else command.command
    return f"{line} {' '.join(shlex.quote(t) for t in tests)}"


def env(command: EvalCommand, tree: Path, base: dict[str, str]) -> dict[str, str]:
    """`base`, and for an eval_script's command the worktree's .venv/bin, then this Python's folder, first on
    PATH: they stand in for the image's activated conda environment, so `python`, `pytest` and a script's
    `#!/usr/bin/env python` find them."""
    if command.source is not Source.EVAL_SCRIPT:
        return base
    folders = [str(tree / ".venv" / "bin")] if (tree / ".venv" / "bin" / "python").exists() else []
    folders.append(str(Path(sys.executable).parent))
    return {**base, "PATH": os.pathsep.join([*folders, base.get("PATH", os.defpath)])}
