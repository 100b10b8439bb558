"""Grading by the official `swebench` package's own code, on test runs Tao made in its own worktrees.

The package decides what a test log says (its per-repository log parser), what counts as passing
(get_eval_report's semantics: a FAIL_TO_PASS test must pass or xfail; a PASS_TO_PASS test may also be
skipped; a missing test fails) and the shape of each instance's report.json. Tao writes its test log as
the official eval script does (the package's markers around the test output, the test command's exit
code after them), so the package reads it as one of its own. The run report mirrors make_run_report,
which reads report files from a fixed folder under the working directory and prints, so cannot be
called on a batch in progress.

The package is the `eval` extra and is imported only when grading: it pulls in docker, modal and datasets.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.swebench.instances import Instance

DEFAULT_PARSER = "parse_log_pytest"  # for repositories the package does not know (Tao's demo, your own): pytest -rA
INSTALL = "pip install 'tao-agent[eval]' (or pip install swebench)"
Failure = tuple[str, str]  # (reason, tier) as swebench.harness.infra_failure classifies a log


def require() -> None:
    """UsageError unless the swebench package is installed."""
    if importlib.util.find_spec("swebench") is None:
        raise UsageError(f"--evaluate grades with the official swebench package, which is not installed; {INSTALL}")


@cache
def parsers_by_repo() -> dict[str, str | None]:
    """Repository -> the PARSER_REGISTRY name of the parser the package's per-language maps give it
    (None where the map's parser is not in the registry, so cannot be named in a TestSpec)."""
    from swebench.harness.log_parsers import PARSER_REGISTRY, c, go, java, javascript, php, python, ruby, rust

    names = {parser: name for name, parser in PARSER_REGISTRY.items()}  # aliases share a function: any name will do
    maps = (python.MAP_REPO_TO_PARSER_PY, javascript.MAP_REPO_TO_PARSER_JS, c.MAP_REPO_TO_PARSER_C,
            go.MAP_REPO_TO_PARSER_GO, java.MAP_REPO_TO_PARSER_JAVA, php.MAP_REPO_TO_PARSER_PHP,
            ruby.MAP_REPO_TO_PARSER_RUBY, rust.MAP_REPO_TO_PARSER_RUST)
    return {repo: names.get(parser) for table in maps for repo, parser in table.items()}


def log_parser(instance: Instance) -> str:
    """The instance's `log_parser` field (SWE-bench 5 datasets carry one), else the package's parser for its
    repository, else pytest's."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    name = instance.extra.get("log_parser") or parsers_by_repo().get(instance.repo, DEFAULT_PARSER)
    if name not in PARSER_REGISTRY:
        raise UsageError(f"instance {instance.instance_id}: swebench has no log parser named {name!r} for "
                         f"{instance.repo}; give the row a log_parser field naming one of "
                         "swebench.harness.log_parsers.PARSER_REGISTRY")
    return str(name)


def eval_type(instance: Instance) -> str:
    """The instance's `eval_type` field, else fail_only for the repositories the package grades so."""
    from swebench.harness.constants import FAIL_ONLY_REPOS, EvalType

    default = EvalType.FAIL_ONLY if instance.repo in FAIL_ONLY_REPOS else EvalType.PASS_AND_FAIL
    value = instance.extra.get("eval_type") or default.value
    if value not in {kind.value for kind in EvalType}:
        raise UsageError(f"instance {instance.instance_id}: eval_type {value!r} is none of "
                         f"{', '.join(kind.value for kind in EvalType)}")
    return str(value)


def test_spec(instance: Instance) -> Any:
    """The package's TestSpec for grading a log (no image or eval script: Tao runs the tests itself)."""
    from swebench.types import TestSpec

    return TestSpec(instance_id=instance.instance_id, image=str(instance.extra.get("image", "")),
                    eval_script_list=[], repo=instance.repo, version=str(instance.extra.get("version", "")),
                    FAIL_TO_PASS=instance.fail_to_pass, PASS_TO_PASS=instance.pass_to_pass,
                    log_parser=log_parser(instance), eval_type=eval_type(instance))


def check(instances: Iterable[Instance]) -> None:
    """Before a batch grades: the package is there and every instance names a parser and eval type it has."""
    require()
    for instance in instances:
        test_spec(instance)


def test_log(command: str, output: str, exit_code: int | None, timed_out: bool, timeout: float) -> str:
    """A test run's log as the official eval script leaves it: output between the package's markers, then the
    test command's exit code; a run killed at the timeout has no end marker and says so as the harness does."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE, TESTS_TIMEOUT

    head = f"$ {command}\n{START_TEST_OUTPUT}\n{output.rstrip()}\n"
    if timed_out:
        return head + f"{TESTS_TIMEOUT}\n\nTimeout error: {timeout:g} seconds exceeded.\n"
    return head + f"{END_TEST_OUTPUT}\n{TEST_EXIT_CODE}: {exit_code}\n"


def patch_failed_log(reason: str) -> str:
    """The log of a run whose patch (the model's or test_patch) did not apply."""
    from swebench.harness.constants import APPLY_PATCH_FAIL

    return f"{APPLY_PATCH_FAIL}:\n{reason}\n"


def reset_failed_log(reason: str) -> str:
    """The log of a run that could not set up the repository at base_commit."""
    from swebench.harness.constants import RESET_FAILED

    return f"{RESET_FAILED}:\n{reason}\n"


def instance_report(instance: Instance, model_patch: str | None, log: Path) -> dict[str, Any]:
    """The package's report for one instance (the value under its id in report.json), graded from the log.
    A blank patch, which the official harness skips, is reported as the package reports a None one."""
    from swebench.harness.grading import get_eval_report

    patch = model_patch if (model_patch or "").strip() else None
    prediction = {"instance_id": instance.instance_id, "model_patch": patch}
    report = get_eval_report(test_spec(instance), prediction, str(log), include_tests_status=True)
    entry: dict[str, Any] = report[instance.instance_id]
    entry["patch_is_None"] = model_patch is None
    return entry


def classify(log: Path) -> Failure | None:
    """Why a run's log suggests the environment failed (reason, tier), by the package's signatures."""
    from swebench.harness.infra_failure import classify_logs

    found = classify_logs(log)
    return None if found is None else (str(found[0]), str(found[1]))


def run_report(instance_ids: Iterable[str], predictions: Mapping[str, str], reports: Mapping[str, dict[str, Any]],
               setup_errors: Iterable[str] = (), failures: Mapping[str, Failure] | None = None) -> dict[str, Any]:
    """The run report with make_run_report's keys and counting (schema_version 2).

    As there: an instance without a prediction is incomplete; a blank patch is an empty patch; a graded
    instance is completed, resolved or not; any other (its patch did not apply, its tests timed out: where
    the official harness writes no report.json) is an error. Tao's own: an instance whose session never
    started (`setup_errors`) is an error, not an empty patch. `failures` holds classify()'s verdicts.
    """
    from swebench.harness.infra_failure import TIER_ENVIRONMENT

    ids = list(instance_ids)
    failed = set(setup_errors)
    submitted = [i for i in ids if i in predictions]
    empty = sorted(i for i in submitted if not predictions[i].strip() and i not in failed)
    graded = {i: reports[i] for i in submitted if i in reports and i not in empty and i not in failed}
    completed = sorted(i for i, r in graded.items() if "error" not in r)
    errors = sorted(i for i in submitted if i not in empty and i not in completed)
    resolved = [i for i in completed if graded[i].get("resolved")]
    unresolved = [i for i in completed if not graded[i].get("resolved")]
    reasons = {i: found for i in sorted({*unresolved, *errors}) if (found := (failures or {}).get(i))}
    infra = sorted(i for i, (_, tier) in reasons.items() if tier == TIER_ENVIRONMENT)
    ambiguous = sorted(i for i in reasons if i not in infra)
    return {
        "total_instances": len(ids), "submitted_instances": len(submitted), "completed_instances": len(completed),
        "resolved_instances": len(resolved), "unresolved_instances": len(unresolved),
        "infra_failure_instances": len(infra), "ambiguous_failure_instances": len(ambiguous),
        "empty_patch_instances": len(empty), "error_instances": len(errors),
        "completed_ids": completed, "incomplete_ids": sorted(set(ids) - set(submitted)), "empty_patch_ids": empty,
        "submitted_ids": sorted(submitted), "resolved_ids": resolved, "unresolved_ids": unresolved,
        "infra_failure_ids": infra, "ambiguous_failure_ids": ambiguous,
        "failure_reasons": {i: reason for i, (reason, _) in reasons.items()}, "error_ids": errors,
        "schema_version": 2,
    }
