"""Grade a prediction without Docker: the model's patch and the instance's test_patch on a worktree at
base_commit, then the instance's tests run with the command eval_command.py chooses (the official eval
script's where the row has one), in this machine's Python environment rather than the official harness's
Docker image.

What the run means is the official swebench package's to say (official.py): its log parser reads the test
log, its grading builds the per-instance report (`{instance_id: {patch_is_None, patch_exists,
patch_successfully_applied, resolved, infra_failure, tests_status}}`), plus `error` here when grading could
not finish. A verdict is only as good as the machine's environment for the repository.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from harness.swebench import eval_command, official
from harness.swebench.instances import Instance
from harness.swebench.worktrees import SetupError, apply_patch, reset_worktree
from sandbox.process import run_process
from tools.run_tests import deterministic_env

DEFAULT_EVAL_TIMEOUT = 1800.0
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)


@dataclass(frozen=True)
class TestRun:
    """One run of the tests: the command line, what it printed, how it ended."""

    command: str
    output: str
    exit_code: int | None
    timed_out: bool


async def run_tests(tree: Path, tests: list[str], timeout: float, command: eval_command.EvalCommand) -> TestRun:
    """Run the instance's tests in the worktree; the whole process group dies at the timeout."""
    script = eval_command.script(command, tree, tests)
    result = await run_process(["bash", "-c", script], tree, timeout=timeout,
                               env=eval_command.env(command, tree, deterministic_env()))
    return TestRun(script, result.text, result.exit_code, result.timed_out)


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


async def evaluate(instance: Instance, tree: Path, model_patch: str | None, timeout: float, log: Path,
                   command: str | None = None) -> dict[str, Any]:
    """Grade the prediction in the worktree: the test log goes to `log`; returns the instance's report as
    report.json holds it under the instance id, with `error` when grading could not finish."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if not (model_patch or "").strip():
        log.write_text("empty patch: nothing to evaluate\n", encoding="utf-8")
        return await asyncio.to_thread(official.instance_report, instance, model_patch, log)
    try:
        await asyncio.to_thread(prepare, tree, instance, model_patch or "")
    except SetupError as exc:
        reason = str(exc)
        entry = await asyncio.to_thread(failed, instance, model_patch, log, official.patch_failed_log(reason), reason)
        entry["patch_successfully_applied"] = "test_patch" in reason  # the model's patch did apply
        return entry
    run = await run_tests(tree, [*instance.fail_to_pass, *instance.pass_to_pass], timeout,
                          eval_command.choose(instance, command))
    log.write_text(official.test_log(run.command, run.output, run.exit_code, run.timed_out, timeout), encoding="utf-8")
    entry = await asyncio.to_thread(official.instance_report, instance, model_patch, log)  # large logs parse slowly
    if run.timed_out:
        entry["error"] = (f"the tests ran longer than {timeout:g} s and were killed; raise --eval-timeout "
                          "or fix the hanging test")
    return entry


def failed(instance: Instance, model_patch: str | None, log: Path, text: str, reason: str) -> dict[str, Any]:
    """The report of a grading that could not run the tests: `text` (one of official's failure logs) goes to
    the log, `reason` to the report's `error`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text, encoding="utf-8")
    entry = official.instance_report(instance, model_patch, log)
    entry["error"] = reason
    return entry
