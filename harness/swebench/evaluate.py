"""Grade a prediction without Docker: the model's patch and the instance's test_patch on a worktree at
base_commit, then FAIL_TO_PASS and PASS_TO_PASS run with the repository's test runner (pytest node ids).

Reports have the shape of the official harness's: a per-instance `report.json`
(`{instance_id: {patch_is_None, patch_exists, patch_successfully_applied, resolved, tests_status}}`)
and a run report (`<model>.<run_id>.json`: total, submitted, completed, resolved, unresolved, empty
patch and error counts and id lists, schema_version 2). A verdict here is only as good as the machine's
Python environment for the repository; the official harness builds that environment in Docker.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from harness.swebench.instances import Instance
from harness.swebench.worktrees import SetupError, apply_patch, reset_worktree
from sandbox.process import run_process
from tools.run_tests import deterministic_env

DEFAULT_EVAL_TIMEOUT = 1800.0
_STATUS = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+)")
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)


@dataclass(frozen=True)
class TestRun:
    """What one run of the tests said about each test id."""

    statuses: dict[str, str]  # test id -> PASSED, FAILED, ERROR, XFAIL, XPASS, SKIPPED
    output: str
    exit_code: int | None
    timed_out: bool


def default_test_command(tree: Path) -> str:
    """pytest with a line per test (-rA) under the worktree's .venv if it has one, else this Python."""
    venv = tree / ".venv" / "bin" / "python"
    python = str(venv) if venv.exists() else shlex.quote(sys.executable)
    return f"{python} -m pytest -rA -p no:cacheprovider"


def parse_pytest(output: str) -> dict[str, str]:
    """Test id -> status from pytest's `-rA` short summary lines."""
    statuses: dict[str, str] = {}
    for line in output.splitlines():
        match = _STATUS.match(line.strip())
        if match and "::" in match.group(2):
            statuses[match.group(2)] = match.group(1)
    return statuses


async def run_tests(tree: Path, tests: list[str], timeout: float, command: str | None = None) -> TestRun:
    """Run the given test ids in the worktree; the whole process group dies at the timeout."""
    line = f"{command or default_test_command(tree)} {' '.join(shlex.quote(t) for t in tests)}"
    result = await run_process(["bash", "-c", line], tree, timeout=timeout, env=deterministic_env())
    return TestRun(parse_pytest(result.text), f"$ {line}\n{result.text}", result.exit_code, result.timed_out)


def tests_status(instance: Instance, statuses: dict[str, str]) -> dict[str, dict[str, list[str]]]:
    """Success and failure per list, as the official report has them (missing tests count as failures)."""
    def passed(test: str) -> bool:
        return statuses.get(test) in ("PASSED", "XFAIL")

    def split(tests: list[str]) -> dict[str, list[str]]:
        return {"success": [t for t in tests if passed(t)], "failure": [t for t in tests if not passed(t)]}

    return {"FAIL_TO_PASS": split(instance.fail_to_pass), "PASS_TO_PASS": split(instance.pass_to_pass),
            "FAIL_TO_FAIL": {"success": [], "failure": []}, "PASS_TO_FAIL": {"success": [], "failure": []}}


def files_of(patch: str) -> list[str]:
    """Paths a unified git diff touches."""
    return list(dict.fromkeys(_DIFF_FILE.findall(patch)))


def prepare(tree: Path, instance: Instance, model_patch: str) -> None:
    """Worktree = base_commit + the model's patch + test_patch (test files reset to base first)."""
    reset_worktree(tree, instance.base_commit)
    apply_patch(tree, model_patch, "model patch")
    repo = git.Repo(tree)
    at_base = [f for f in files_of(instance.test_patch) if _exists_at(repo, instance.base_commit, f)]
    if at_base:
        repo.git.checkout(instance.base_commit, "--", *at_base)
    new = [f for f in files_of(instance.test_patch) if f not in at_base and (tree / f).exists()]
    for path in new:  # a test file the model created where test_patch creates one: test_patch wins
        (tree / path).unlink()
    apply_patch(tree, instance.test_patch, "test_patch")


def _exists_at(repo: git.Repo, commit: str, path: str) -> bool:
    try:
        repo.commit(commit).tree / path
        return True
    except KeyError:
        return False


async def evaluate(instance: Instance, tree: Path, model_patch: str | None, timeout: float,
                   command: str | None = None) -> tuple[dict[str, Any], str]:
    """The instance's official-shape report (plus `error` when grading could not finish) and the test log."""
    entry: dict[str, Any] = {"patch_is_None": model_patch is None, "patch_exists": bool((model_patch or "").strip()),
                             "patch_successfully_applied": False, "resolved": False}
    if not entry["patch_exists"]:
        return {instance.instance_id: entry}, "empty patch: nothing to evaluate\n"
    try:
        await asyncio.to_thread(prepare, tree, instance, model_patch or "")
    except SetupError as exc:
        entry["error"] = str(exc)
        entry["patch_successfully_applied"] = "test_patch" in str(exc)
        return {instance.instance_id: entry}, f"{exc}\n"
    entry["patch_successfully_applied"] = True
    run = await run_tests(tree, [*instance.fail_to_pass, *instance.pass_to_pass], timeout, command)
    if run.timed_out:
        entry["error"] = (f"the tests ran longer than {timeout:g} s and were killed; raise --eval-timeout "
                          "or fix the hanging test")
        return {instance.instance_id: entry}, run.output + f"\n[{entry['error']}]\n"
    status = tests_status(instance, run.statuses)
    entry["tests_status"] = status
    entry["resolved"] = not status["FAIL_TO_PASS"]["failure"] and not status["PASS_TO_PASS"]["failure"]
    return {instance.instance_id: entry}, run.output


def run_report(instance_ids: Iterable[str], predictions: dict[str, str], reports: dict[str, dict[str, Any]],
               setup_errors: Iterable[str] = ()) -> dict[str, Any]:
    """The run report in the official harness's shape (schema_version 2)."""
    ids = list(instance_ids)
    submitted = [i for i in ids if i in predictions]
    failed = set(setup_errors)
    empty = [i for i in submitted if not predictions[i].strip() and i not in failed]
    graded = {i: reports[i] for i in submitted if i in reports and i not in empty and i not in failed}
    completed = [i for i, r in graded.items() if "error" not in r]
    errors = sorted({*failed & set(submitted), *(i for i, r in graded.items() if "error" in r)})
    resolved = [i for i in completed if graded[i].get("resolved")]
    unresolved = [i for i in completed if not graded[i].get("resolved")]
    return {
        "total_instances": len(ids), "submitted_instances": len(submitted), "completed_instances": len(completed),
        "resolved_instances": len(resolved), "unresolved_instances": len(unresolved),
        "empty_patch_instances": len(empty), "error_instances": len(errors),
        "completed_ids": sorted(completed), "incomplete_ids": sorted(set(ids) - set(completed)),
        "empty_patch_ids": sorted(empty), "submitted_ids": sorted(submitted), "resolved_ids": sorted(resolved),
        "unresolved_ids": sorted(unresolved), "error_ids": errors, "schema_version": 2,
    }
