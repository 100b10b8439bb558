"""Grading through the official swebench package on the bundled demo instances (harness/swebench/demo_dataset.py):
Tao runs the tests in its own worktrees, the package reads the logs and builds the reports, and the reports have
the official harness's shapes, checked against the package's own report code on the same logs."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from swebench.harness.grading import get_eval_report
from swebench.harness.reporting import make_run_report
from swebench.types import TestSpec as Spec  # not collected by pytest as a Test* class

from harness.errors import UsageError
from harness.swebench import official
from harness.swebench.demo_dataset import make_demo
from harness.swebench.evaluate import evaluate
from harness.swebench.instances import Instance, load_instances
from harness.swebench.worktrees import add_worktree
from tests.helpers import ROOT, git

# Plugins of this venv (textual snapshots, hypothesis) make each pytest start slowly; the graded repo needs none.
EVAL = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -rA -p no:cacheprovider"
ADD, ADD_NEGATIVE = "tests/test_ops.py::test_add", "tests/test_ops.py::test_add_negative"
SUBTRACT, AVERAGE = "tests/test_ops.py::test_subtract", "tests/test_ops.py::test_average"
ENTRY_KEYS = {"patch_is_None", "patch_exists", "patch_successfully_applied", "resolved", "infra_failure"}
RESOLVED, PARTIAL, BREAKS_P2P, EMPTY, BAD_PATCH = (f"tao__calc-{n}" for n in range(1, 6))


def edit(clone: Path, old: str, new: str) -> str:
    """The diff that replaces `old` by `new` in calc/ops.py (the clone is left as it was)."""
    ops = clone / "calc" / "ops.py"
    text = ops.read_text()
    ops.write_text(text.replace(old, new))
    try:
        return git(clone, "diff")
    finally:
        ops.write_text(text)


def predictions(clone: Path) -> dict[str, str]:
    """A prediction of each kind: the fix, half a fix, a fix that breaks a passing test, none, one that cannot apply."""
    fix = edit(clone, "    return a - b\n\n\ndef subtract", "    return a + b\n\n\ndef subtract")
    return {RESOLVED: fix,
            PARTIAL: edit(clone, "    return a - b\n\n\ndef subtract", "    return abs(a) + abs(b)\n\n\ndef subtract"),
            BREAKS_P2P: edit(clone, "    return a - b", "    return a + b"),
            EMPTY: "", BAD_PATCH: fix.replace("return a - b", "return a / b")}


def official_layout(root: Path, run_id: str, model: str, reports: dict[str, dict[str, Any]], logs: Path) -> None:
    """Lay graded instances out as the official harness leaves them (logs/run_evaluation/RUN/MODEL/ID/): a
    report.json where it writes one (not for an error, nor an empty patch it never runs), the test output beside."""
    for iid, entry in reports.items():
        if not entry["patch_exists"]:
            continue
        folder = root / "logs" / "run_evaluation" / run_id / model / iid
        folder.mkdir(parents=True)
        shutil.copy(logs / f"{iid}.log", folder / "test_output.txt")
        if "error" not in entry:
            (folder / "report.json").write_text(json.dumps({iid: entry}, indent=4))


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Instance], dict[str, str], dict[str, Any]]:
    """Five demo instances, each graded on its own worktree with one kind of prediction."""
    root = tmp_path_factory.mktemp("grading")
    instances = load_instances(make_demo(root, 5))
    clone = root / "repos" / "tao" / "calc"
    preds = predictions(clone)

    async def grade_all() -> dict[str, Any]:
        reports = {}
        for instance in instances:
            tree = add_worktree(clone, instance.base_commit, root / "worktrees" / instance.instance_id)
            reports[instance.instance_id] = await evaluate(instance, tree, preds[instance.instance_id], 120.0,
                                                           root / "logs" / f"{instance.instance_id}.log", EVAL)
        return reports

    return root, instances, preds, asyncio.run(grade_all())


def test_each_instance_report_has_the_official_shape_and_verdict(graded: tuple) -> None:
    _, _, _, reports = graded
    resolved = reports[RESOLVED]
    assert set(resolved) == ENTRY_KEYS | {"tests_status"} and resolved["resolved"] is True
    assert resolved["patch_successfully_applied"] and not resolved["patch_is_None"]
    assert resolved["tests_status"] == {
        "FAIL_TO_PASS": {"success": [ADD, ADD_NEGATIVE], "failure": []},
        "PASS_TO_PASS": {"success": [SUBTRACT, AVERAGE], "failure": []},
        "FAIL_TO_FAIL": {"success": [], "failure": []}, "PASS_TO_FAIL": {"success": [], "failure": []}}
    # the package's semantics: one FAIL_TO_PASS test of two passing is RESOLVED_PARTIAL, which is not resolved
    assert reports[PARTIAL]["resolved"] is False
    assert reports[PARTIAL]["tests_status"]["FAIL_TO_PASS"] == {"success": [ADD], "failure": [ADD_NEGATIVE]}
    breaks = reports[BREAKS_P2P]
    assert breaks["resolved"] is False and breaks["tests_status"]["FAIL_TO_PASS"]["failure"] == []
    assert breaks["tests_status"]["PASS_TO_PASS"] == {"success": [AVERAGE], "failure": [SUBTRACT]}
    assert reports[EMPTY] == {"patch_is_None": False, "patch_exists": False, "patch_successfully_applied": False,
                              "resolved": False, "infra_failure": False}
    bad = reports[BAD_PATCH]
    assert set(bad) == ENTRY_KEYS | {"error"} and "model patch does not apply" in bad["error"]
    assert bad["patch_successfully_applied"] is False and bad["resolved"] is False


def test_the_test_log_regrades_to_the_same_report_with_the_package_alone(graded: tuple) -> None:
    """What `swebench report` does for a finished run: grade the saved log again, with a TestSpec of its own."""
    root, instances, preds, reports = graded
    for instance in instances:
        iid = instance.instance_id
        if not preds[iid] or "error" in reports[iid]:
            continue
        spec = Spec(instance_id=iid, image="", eval_script_list=[], repo="tao/calc", version="",
                        FAIL_TO_PASS=instance.fail_to_pass, PASS_TO_PASS=instance.pass_to_pass,
                        log_parser="parse_log_pytest", eval_type="pass_and_fail")
        log = root / "logs" / f"{iid}.log"
        again = get_eval_report(spec, {"instance_id": iid, "model_patch": preds[iid]}, str(log), True)
        assert again == {iid: reports[iid]}
        assert ">>>>> Start Test Output" in log.read_text() and ">>>>> Test Exit Code: " in log.read_text()


def test_the_run_report_is_the_one_the_package_makes_from_the_same_logs(
        graded: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root, instances, preds, reports = graded
    ids = [i.instance_id for i in instances]
    failures = {iid: found for iid, entry in reports.items()
                if not entry["resolved"] and (found := official.classify(root / "logs" / f"{iid}.log"))}
    ours = official.run_report(ids, preds, reports, failures=failures)
    assert ours["resolved_ids"] == [RESOLVED] and ours["unresolved_ids"] == [PARTIAL, BREAKS_P2P]
    assert ours["empty_patch_ids"] == [EMPTY] and ours["error_ids"] == [BAD_PATCH]

    official_layout(tmp_path, "t1", "tao__demo", reports, root / "logs")
    monkeypatch.chdir(tmp_path)  # make_run_report reads ./logs/run_evaluation
    dataset = [{"instance_id": iid} for iid in ids]
    pred_rows = {iid: {"instance_id": iid, "model_name_or_path": "tao/demo", "model_patch": patch}
                 for iid, patch in preds.items()}
    written = make_run_report(pred_rows, dataset, "t1", client=None, report_dir=str(tmp_path))
    capsys.readouterr()  # it prints its counts
    assert json.loads(Path(written).read_text()) == ours


def test_tao_swebench_evaluate_on_the_demo_writes_reports_the_package_would(tmp_path: Path) -> None:
    """`tao swebench --evaluate` end to end on two demo instances with their recorded fixes (the replay engine)."""
    instances = make_demo(tmp_path, 2)
    argv = [sys.executable, "-m", "harness.cli", "swebench", "--instances", str(instances),
            "--repos", str(tmp_path / "repos"), "--output", str(tmp_path / "out"), "--engine", "replay",
            "--replay", str(tmp_path / "scripts"), "--workers", "2", "--evaluate", "--eval-command", EVAL,
            "--model-name", "tao/demo", "--run-id", "demo"]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    for instance in load_instances(instances):
        iid = instance.instance_id
        report = json.loads((out / "instances" / iid / "report.json").read_text())
        assert list(report) == [iid] and report[iid]["resolved"] is True
        again = official.instance_report(instance, "a patch", out / "instances" / iid / "eval.log")
        assert again == report[iid]
    run = json.loads((out / "tao__demo.demo.json").read_text())
    assert run["resolved_ids"] == ["tao__calc-1", "tao__calc-2"] and run["schema_version"] == 2
    assert run["failure_reasons"] == {} and run["error_ids"] == []


def instance(repo: str, **extra: Any) -> Instance:
    """An instance of `repo` with the given extra fields (as a dataset row's unknown fields land)."""
    return Instance(instance_id="o__r-1", repo=repo, base_commit="abc", problem_statement="", fail_to_pass=[],
                    pass_to_pass=[], test_patch="", extra=extra)


def test_each_repository_gets_the_package_parser_and_eval_type() -> None:
    assert official.log_parser(instance("django/django")) == "parse_log_django"
    assert official.log_parser(instance("sympy/sympy")) == "parse_log_sympy"
    assert official.log_parser(instance("tao/calc")) == "parse_log_pytest"  # a repository the package does not know
    assert official.log_parser(instance("django/django", log_parser="parse_log_pytest_v2")) == "parse_log_pytest_v2"
    assert official.eval_type(instance("eslint/eslint")) == "fail_only"
    assert official.eval_type(instance("django/django")) == "pass_and_fail"
    with pytest.raises(UsageError, match="no log parser named 'parse_log_nope'"):
        official.check([instance("o/r", log_parser="parse_log_nope")])
    with pytest.raises(UsageError, match="eval_type 'sometimes' is none of"):
        official.check([instance("o/r", eval_type="sometimes")])


def test_a_django_log_is_read_by_the_django_parser(tmp_path: Path) -> None:
    """Django's runner prints `name (module.Class) ... ok`; pytest's parser would find no test in it."""
    django = Instance(instance_id="django__django-1", repo="django/django", base_commit="abc", problem_statement="",
                      fail_to_pass=["test_fix (app.tests.T)"], pass_to_pass=["test_old (app.tests.T)"], test_patch="")
    output = "test_fix (app.tests.T) ... ok\ntest_old (app.tests.T) ... FAIL\n\nRan 2 tests in 0.01s\n\nFAILED\n"
    log = tmp_path / "eval.log"
    log.write_text(official.test_log("./tests/runtests.py app", output, 1, False, 60))
    entry = official.instance_report(django, "diff", log)
    assert entry["patch_successfully_applied"] is True and entry["resolved"] is False
    assert entry["tests_status"]["PASS_TO_PASS"] == {"success": [], "failure": ["test_old (app.tests.T)"]}


def test_a_missing_package_is_named_with_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "swebench", None)  # how Python marks a module as unimportable
    with pytest.raises(UsageError, match=r"tao-agent\[eval\]"):
        official.check([])
