"""`tao swebench` end to end with the replay engine: a dataset built from a real git repository with real
bugs, sessions in worktrees on one shared engine, official-format predictions, grading, resume, and the
instances that fail (no clone, unknown commit, a test_patch that does not apply, a hanging test)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.events import SessionEnd, read_trajectory
from tests.helpers import ROOT
from tests.test_swebench_data import IDS, make_dataset

# Plugins of this venv (textual snapshots, hypothesis) make each pytest start slowly; the graded repo needs none.
EVAL = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -rA -p no:cacheprovider"
RESOLVED, UNRESOLVED, MISSING, BAD_PATCH, HANGS, UNKNOWN_COMMIT = IDS


def tao_swebench(root: Path, *extra: str, scripts: Path | None = None,
                 wait: bool = True) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    """Run `tao swebench` on the dataset under root with the replay engine, as a user would."""
    argv = [sys.executable, "-m", "harness.cli", "swebench", "--instances", str(root / "instances.jsonl"),
            "--repos", str(root / "repos"), "--output", str(root / "out"), "--engine", "replay",
            "--replay", str(scripts or root / "scripts"), "--eval-command", EVAL, "--eval-timeout", "10", *extra]
    if not wait:  # as from a terminal: SIGINT at its default, even when this pytest was started with it ignored
        return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)  # generous: a busy machine


def load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole dataset run once with grading, four workers."""
    root = tmp_path_factory.mktemp("swebench")
    make_dataset(root)
    result = tao_swebench(root, "--workers", "4", "--evaluate", "--model-name", "tao/replay", "--run-id", "t1")
    assert result.returncode == 0, result.stderr
    assert "6/6 done" in result.stderr and "1/4 resolved" in result.stderr
    return root


def test_predictions_are_in_the_official_format(batch: Path) -> None:
    out = batch / "out"
    lines = [json.loads(line) for line in (out / "preds.jsonl").read_text().splitlines()]
    assert [p["instance_id"] for p in lines] == list(IDS)  # the dataset's order
    assert all(set(p) == {"instance_id", "model_name_or_path", "model_patch"} for p in lines)
    assert {p["model_name_or_path"] for p in lines} == {"tao/replay"}
    assert load(out / "preds.json") == lines
    patches = {p["instance_id"]: p["model_patch"] for p in lines}
    assert "-    return a + b\n+    return a * b" in patches[RESOLVED]
    assert patches[UNRESOLVED] == "" and patches[MISSING] == "" and patches[UNKNOWN_COMMIT] == ""
    clone = batch / "repos" / "acme" / "mathlib"
    check = subprocess.run(["git", "apply", "--check", "-"], cwd=clone, input=patches[RESOLVED], text=True)
    assert check.returncode == 0


def test_each_instance_has_its_trajectory_and_result(batch: Path) -> None:
    out = batch / "out"
    for iid in (RESOLVED, UNRESOLVED, BAD_PATCH, HANGS):
        events = read_trajectory(out / "instances" / iid / "trajectory.jsonl")
        assert events[0].type == "session_start" and "<issue>" in events[0].task
        assert isinstance(events[-1], SessionEnd) and events[-1].status == "finished"
    result = load(out / "instances" / RESOLVED / "result.json")
    assert result["status"] == "finished" and result["steps"] == 3 and result["resolved"] is True
    assert result["summary"] == "mul now multiplies" and "launched" in result["speculation"]
    assert not any((out / "worktrees").iterdir())  # worktrees are removed once an instance is done
    summary = load(out / "summary.json")
    assert summary["instances"] == summary["done"] == 6 and summary["resolved"] == 1 and summary["evaluated"] == 4
    assert summary["status"] == {"finished": 4, "error": 2} and summary["steps"] == 3 + 2 + 2 + 2
    assert summary["policy"] == "pacing" and summary["speculation_on"] is True


def test_evaluation_reports_resolved_and_unresolved(batch: Path) -> None:
    out = batch / "out"
    resolved = load(out / "instances" / RESOLVED / "report.json")[RESOLVED]
    assert resolved["resolved"] is True and resolved["patch_successfully_applied"] is True
    assert resolved["tests_status"]["FAIL_TO_PASS"] == {"success": ["tests/test_ops.py::test_mul"], "failure": []}
    assert resolved["tests_status"]["PASS_TO_PASS"] == {"success": ["tests/test_ops.py::test_add"], "failure": []}
    assert "PASSED tests/test_ops.py::test_mul" in (out / "instances" / RESOLVED / "eval.log").read_text()
    unresolved = load(out / "instances" / UNRESOLVED / "report.json")[UNRESOLVED]
    assert unresolved["patch_exists"] is False and unresolved["resolved"] is False  # gave up: an empty patch
    run = load(out / "tao__replay.t1.json")
    assert run["schema_version"] == 2 and run["total_instances"] == run["submitted_instances"] == 6
    assert run["resolved_ids"] == [RESOLVED] and run["empty_patch_ids"] == [UNRESOLVED]
    assert run["error_ids"] == sorted([MISSING, BAD_PATCH, HANGS, UNKNOWN_COMMIT])
    assert run["completed_instances"] == 1 and run["unresolved_ids"] == []


def test_bad_input_marks_the_instance_with_the_reason(batch: Path) -> None:
    out = batch / "out"
    missing = load(out / "instances" / MISSING / "result.json")
    assert missing["status"] == "error" and missing["stage"] == "setup"
    assert "no git clone of acme/missing" in missing["reason"] and "git clone" in missing["reason"]
    unknown = load(out / "instances" / UNKNOWN_COMMIT / "result.json")
    assert "commit 0123456789abcdef" in unknown["reason"] and "fetch" in unknown["reason"]
    bad = load(out / "instances" / BAD_PATCH / "report.json")[BAD_PATCH]
    assert bad["resolved"] is False and "test_patch does not apply" in bad["error"]
    hangs = load(out / "instances" / HANGS / "result.json")
    assert hangs["resolved"] is False and "longer than 10 s and were killed" in hangs["evaluation_error"]


def test_a_rerun_skips_finished_instances_and_redo_runs_them_again(batch: Path, tmp_path: Path) -> None:
    out = batch / "out"
    before = {iid: (out / "instances" / iid / "result.json").read_text() for iid in IDS}
    no_scripts = tmp_path / "none"
    no_scripts.mkdir()  # a rerun that ran any session again would fail for want of a script
    again = tao_swebench(batch, "--evaluate", "--model-name", "tao/replay", "--run-id", "t1", scripts=no_scripts)
    assert again.returncode == 0, again.stderr
    assert {iid: (out / "instances" / iid / "result.json").read_text() for iid in IDS} == before

    redo = tao_swebench(batch, "--redo", "--model-name", "tao/replay", scripts=no_scripts)
    assert redo.returncode == 0, redo.stderr
    result = load(out / "instances" / RESOLVED / "result.json")
    assert result["status"] == "error" and "no turn script for instance" in result["reason"]


def test_ctrl_c_keeps_finished_instances_and_a_rerun_resumes(tmp_path: Path) -> None:
    make_dataset(tmp_path)
    out = tmp_path / "out"
    proc = tao_swebench(tmp_path, "--workers", "1", "--seconds-per-token", "0.02", "--no-speculation", wait=False)
    first = out / "instances" / IDS[0] / "result.json"
    deadline = time.monotonic() + 600  # a condition to wait on, with a deadline a busy machine cannot reach
    while not first.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=600)
    assert first.exists(), f"the first instance never finished: {stderr}"
    assert proc.returncode == 130, stderr
    assert "rerun the same command to resume" in stderr
    done = [iid for iid in IDS if (out / "instances" / iid / "result.json").exists()]
    assert IDS[0] in done and len(done) < len(IDS)
    preds = [json.loads(line)["instance_id"] for line in (out / "preds.jsonl").read_text().splitlines()]
    assert preds == done
    kept = first.read_text()

    rerun = tao_swebench(tmp_path, "--workers", "2", "--no-speculation")
    assert rerun.returncode == 0, rerun.stderr
    assert first.read_text() == kept
    preds = [json.loads(line)["instance_id"] for line in (out / "preds.jsonl").read_text().splitlines()]
    assert preds == list(IDS)
    assert load(out / "summary.json")["status"] == {"finished": 4, "error": 2}


def test_usage_errors_say_what_to_do(tmp_path: Path) -> None:
    make_dataset(tmp_path)
    single = tmp_path / "one.json"
    single.write_text(json.dumps({"turns": ["x"]}))
    result = tao_swebench(tmp_path, scripts=single)
    assert result.returncode == 2 and "needs --replay DIR" in result.stderr
