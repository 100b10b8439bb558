"""Grading a repository whose tests are not pytest's, with no --eval-command: the test command is the one in the
row's eval_script (as SWE-bench 5 datasets carry it), run alone in Tao's worktree, and the package's own sympy
parser reads what it printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from swebench.harness.grading import get_eval_report
from swebench.harness.log_parsers import parse_log_sympy
from swebench.harness.utils import make_test_spec

from harness.errors import UsageError
from harness.swebench import eval_command
from harness.swebench.eval_command import Source
from harness.swebench.instances import Instance
from tests.helpers import ROOT, git

# sympy's bin/test, cut down to what its reporter prints with --verbose: a header, `file[n] `, a line per test
# ending in ok / F / E, the file's [OK] or [FAIL] right-aligned on its last test's line, each failure's
# traceback under a centred `file::test` rule, the centred tally, and exit status 1 when anything failed.
BIN_TEST = r'''#!/usr/bin/env python
import importlib.util, sys, time, traceback
from pathlib import Path

WIDTH = 80
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def center(text, delim="="):
    text = " %s " % text if text else ""
    left = (WIDTH - len(text)) // 2
    print(delim * left + text + delim * (WIDTH - left - len(text)))


center("test process starts")
print("executable:         %s  (%s.%s.%s-%s-%s) [CPython]" % (sys.executable, *sys.version_info))
print("architecture:       64-bit\ncache:              no\nground types:       python \nnumpy:              None")
print("random seed:        12345678\nhash randomization: on (PYTHONHASHSEED=1234)\n")
start, passed, failed, errors = time.time(), 0, [], []
for name in [arg for arg in sys.argv[1:] if not arg.startswith("-")]:
    spec = importlib.util.spec_from_file_location(Path(name).stem, ROOT / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = [f for key, f in vars(module).items() if key.startswith("test_") and callable(f)]
    line, bad = "%s[%d] " % (name, len(tests)), False
    sys.stdout.write(line)
    for test in tests:
        line = test.__name__ + " "
        try:
            test()
            passed, mark = passed + 1, "ok"
        except AssertionError:
            failed.append((name, test, sys.exc_info()))
            bad, mark = True, "F"
        except Exception:
            errors.append((name, test, sys.exc_info()))
            bad, mark = True, "E"
        line += mark
        sys.stdout.write("\n" + line)
    tag = "[FAIL]" if bad else "[OK]"
    print(" " + " " * (WIDTH - len(line) - 1 - len(tag)) + tag + "\n")
for title, found in (("%s:%s", errors), ("%s::%s", failed)):
    for name, test, info in found:
        center("", "_")
        center(title % (name, test.__name__), "_")
        print("".join(traceback.format_exception(*info)))
tally = "tests finished: %d passed, " % passed
tally += "%d failed, " % len(failed) if failed else ""
tally += "%d exceptions, " % len(errors) if errors else ""
center(tally + "in %.2f seconds" % (time.time() - start))
if failed or errors:
    print("DO *NOT* COMMIT!")
sys.exit(1 if failed or errors else 0)
'''
OPS = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = ("from sympy.calc.ops import add, sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n\n\n"
         "def test_zero():\n    assert add(0, 0) == 0\n")
NEW_TEST = "def test_add():\n    assert add(2, 3) == 5\n\n\n"
TEST_FILE = "sympy/calc/tests/test_ops.py"
TEST_CMD = f"PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose {TEST_FILE}"
FIXED, BROKEN = "sympy__sympy-1", "sympy__sympy-2"


def eval_script(base: str, test_patch: str) -> str:
    """An eval.sh laid out as the official harness's for sympy: the image's setup, the test files reset and
    test_patch applied, the test command between the package's markers, the test files reset again."""
    reset = f"git checkout {base} {TEST_FILE}"
    return "\n".join([
        "#!/bin/bash", "set -uxo pipefail", "source /opt/miniconda3/bin/activate", "conda activate testbed",
        "cd /testbed", "git config --global --add safe.directory /testbed", "cd /testbed", "git status",
        "git show", f"git -c core.fileMode=false diff {base}", "source /opt/miniconda3/bin/activate",
        "conda activate testbed", "python -m pip install -e .", reset,
        f"git apply -v - <<'EOF_114329324912'\n{test_patch}\nEOF_114329324912",
        ": '>>>>> Start Test Output'", TEST_CMD, ": '>>>>> End Test Output'", reset]) + "\n"


def sympy_dataset(root: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A clone of a small sympy-shaped repository (its bin/test, a bug in add) and two SWE-bench 5 rows on it."""
    clone = root / "repos" / "sympy" / "sympy"
    for path, text in {"bin/test": BIN_TEST, "sympy/__init__.py": "", "sympy/calc/__init__.py": "",
                       "sympy/calc/ops.py": OPS, "sympy/calc/tests/__init__.py": "", TEST_FILE: TESTS}.items():
        (clone / path).parent.mkdir(parents=True, exist_ok=True)
        (clone / path).write_text(text)
    (clone / "bin" / "test").chmod(0o755)
    git(clone, "init", "-q")
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "sympy")
    base = git(clone, "rev-parse", "HEAD").strip()
    (clone / TEST_FILE).write_text(TESTS.replace("def test_zero", NEW_TEST + "def test_zero"))
    test_patch = git(clone, "diff")
    git(clone, "checkout", "-q", "--", TEST_FILE)
    rows = [{"instance_id": iid, "repo": "sympy/sympy", "base_commit": base, "version": "1.1",
             "problem_statement": f"add subtracts ({iid})", "test_patch": test_patch,
             "FAIL_TO_PASS": json.dumps(["test_add"]), "PASS_TO_PASS": json.dumps(["test_sub"]),
             "image": f"swebench/sweb.eval.x86_64.{iid.replace('__', '_1776_')}:latest",
             "log_parser": "parse_log_sympy", "eval_type": "pass_and_fail",
             "eval_script": eval_script(base, test_patch)} for iid in (FIXED, BROKEN)]
    instances = root / "instances.jsonl"
    instances.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return instances, rows


def edit_turns(old: str, new: str) -> dict[str, Any]:
    """A turn script that makes one edit to sympy/calc/ops.py and finishes."""
    edit = {"name": "edit_file", "arguments": {"path": "sympy/calc/ops.py", "old": old, "new": new}}
    done = {"name": "finish", "arguments": {"summary": "edited add"}}
    return {"turns": [f"<tool_call>{json.dumps(edit)}</tool_call>", f"<tool_call>{json.dumps(done)}</tool_call>"]}


def test_a_sympy_instance_is_graded_with_its_eval_script_command_and_sympy_parser(tmp_path: Path) -> None:
    instances, rows = sympy_dataset(tmp_path)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / f"{FIXED}.json").write_text(json.dumps(edit_turns(OPS, OPS.replace("a - b", "a + b", 1))))
    (scripts / f"{BROKEN}.json").write_text(json.dumps(edit_turns(OPS, OPS.replace("a - b", "a + b"))))
    argv = [sys.executable, "-m", "harness.cli", "swebench", "--instances", str(instances), "--repos",
            str(tmp_path / "repos"), "--output", str(tmp_path / "out"), "--engine", "replay", "--replay", str(scripts),
            "--workers", "2", "--evaluate", "--eval-timeout", "120", "--model-name", "tao/sympy", "--run-id", "s"]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr

    out = tmp_path / "out" / "instances"
    log = (out / FIXED / "eval.log").read_text()
    assert f"$ set -uo pipefail\n{TEST_CMD}\n" in log  # the test command alone: no conda, pip or git of the image's
    statuses = parse_log_sympy(log.split(">>>>> Start Test Output")[1], make_test_spec(rows[0]))
    assert statuses == {"test_sub": "PASSED", "test_add": "PASSED"}  # test_zero shares its line with [OK]
    fixed = json.loads((out / FIXED / "report.json").read_text())[FIXED]
    assert fixed["resolved"] is True
    assert fixed["tests_status"]["FAIL_TO_PASS"] == {"success": ["test_add"], "failure": []}
    assert fixed["tests_status"]["PASS_TO_PASS"] == {"success": ["test_sub"], "failure": []}
    broken = json.loads((out / BROKEN / "report.json").read_text())[BROKEN]
    assert broken["resolved"] is False and broken["patch_successfully_applied"] is True
    assert broken["tests_status"]["FAIL_TO_PASS"] == {"success": ["test_add"], "failure": []}
    assert broken["tests_status"]["PASS_TO_PASS"] == {"success": [], "failure": ["test_sub"]}
    assert ">>>>> Test Exit Code: 1" in (out / BROKEN / "eval.log").read_text()

    for row in rows:  # the package alone, from the dataset row and the log, gives the same verdicts
        spec = make_test_spec(row)
        iid = row["instance_id"]
        again = get_eval_report(spec, {"instance_id": iid, "model_patch": "a patch"}, str(out / iid / "eval.log"), True)
        assert again == json.loads((out / iid / "report.json").read_text())
    run = json.loads((tmp_path / "out" / "tao__sympy.s.json").read_text())
    assert run["resolved_ids"] == [FIXED] and run["unresolved_ids"] == [BROKEN]


def instance(repo: str, **extra: Any) -> Instance:
    """An instance of `repo` with the given extra fields (as a dataset row's unknown fields land)."""
    return Instance(instance_id="o__r-1", repo=repo, base_commit="abc", problem_statement="",
                    fail_to_pass=["t1"], pass_to_pass=["t2"], test_patch="", extra=extra)


def test_the_command_is_the_given_one_else_the_eval_scripts_else_pytest_on_the_ids(tmp_path: Path) -> None:
    script = eval_script("abc", "diff --git a/x b/x\n")
    django = instance("django/django", eval_script=script.replace(TEST_CMD, "./tests/runtests.py --parallel 1 a.b"))
    assert eval_command.choose(django, None) == eval_command.EvalCommand("./tests/runtests.py --parallel 1 a.b",
                                                                         Source.EVAL_SCRIPT)
    assert eval_command.script(eval_command.choose(django, None), tmp_path, ["t1"]).endswith("--parallel 1 a.b")
    given = eval_command.choose(django, "make test")
    assert given.source is Source.GIVEN and eval_command.script(given, tmp_path, ["t1", "t 2"]) == "make test t1 't 2'"
    pytest_ids = eval_command.choose(instance("astropy/astropy"), None)  # an old row of a pytest repository
    assert pytest_ids.source is Source.PYTEST
    assert eval_command.script(pytest_ids, tmp_path, ["a.py::t"]).endswith("-m pytest -rA -p no:cacheprovider a.py::t")
    assert eval_command.choose(instance("tao/calc"), None).source is Source.PYTEST  # a repository the package lacks


def test_a_repository_with_its_own_runner_and_no_eval_script_needs_eval_command() -> None:
    with pytest.raises(UsageError, match=r"no eval_script.*parse_log_django.*pass --eval-command"):
        eval_command.check([instance("django/django")], None)
    with pytest.raises(UsageError, match=r"reads its tests with parse_log_gotest, which is not pytest"):
        eval_command.check([instance("o/r", log_parser="parse_log_gotest")], None)
    eval_command.check([instance("django/django")], "./tests/runtests.py")
    with pytest.raises(UsageError, match="no test command between"):
        eval_command.check([instance("o/r", eval_script="#!/bin/bash\npytest -rA\n")], None)
