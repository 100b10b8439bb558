"""A small SWE-bench-style dataset built from a git repository the tests create (no tests here).

The repository `acme/mathlib` has two real bugs at its base commit: `mul` adds and `neg` returns its
argument. Each instance's test_patch adds the failing test that shows its bug; turn scripts for the
replay engine fix one bug, give up on another, and so on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import git

OPS = '''"""Small math helpers."""


def add(a, b):
    return a + b


def mul(a, b):
    return a + b


def neg(x):
    return x
'''
TEST_OPS = '''from mathlib.ops import add


def test_add():
    assert add(2, 3) == 5
'''
TEST_MUL = '''from mathlib.ops import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
'''
TEST_NEG = '''from mathlib.ops import neg


def test_neg():
    assert neg(4) == -4
'''
TEST_HANG = '''import time


def test_hang():
    time.sleep(600)
'''
BAD_PATCH = """diff --git a/tests/test_ops.py b/tests/test_ops.py
--- a/tests/test_ops.py
+++ b/tests/test_ops.py
@@ -1,3 +1,4 @@
-from mathlib.ops import subtract
+from mathlib.ops import subtract, divide
\x20
\x20
 def test_subtract():
"""
IDS = ("acme__mathlib-1", "acme__mathlib-2", "acme__missing-3", "acme__mathlib-4", "acme__mathlib-5",
       "acme__mathlib-6")


def make_repo(repos: Path) -> tuple[Path, str]:
    """repos/acme/mathlib with its buggy base commit; returns the clone and the commit."""
    repo = repos / "acme" / "mathlib"
    (repo / "mathlib").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pyproject.toml").write_text('[project]\nname = "mathlib"\nversion = "0"\n')
    (repo / "mathlib" / "__init__.py").write_text("")
    (repo / "mathlib" / "ops.py").write_text(OPS)
    (repo / "tests" / "test_ops.py").write_text(TEST_OPS)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo, git(repo, "rev-parse", "HEAD").strip()


def patch_of(repo: Path, files: dict[str, str]) -> str:
    """The git diff that writes `files` over the base commit (the clone is left unchanged)."""
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    diff = git(repo, "diff", "--cached")
    git(repo, "reset", "-q", "--hard")
    return diff


def call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


FIX_MUL = call("edit_file", path="mathlib/ops.py", old="def mul(a, b):\n    return a + b",
               new="def mul(a, b):\n    return a * b")
SCRIPTS = {
    "acme__mathlib-1": ["Let me look at the helpers.\n" + call("read_file", path="mathlib/ops.py"),
                        "mul adds instead of multiplying.\n" + FIX_MUL,
                        call("finish", summary="mul now multiplies")],
    "acme__mathlib-2": [call("read_file", path="mathlib/ops.py"), call("finish", summary="I could not find the bug")],
    "acme__mathlib-4": [FIX_MUL, call("finish", summary="fixed mul")],
    "acme__mathlib-5": [FIX_MUL, call("finish", summary="fixed mul")],
    "acme__mathlib-6": [FIX_MUL, call("finish", summary="fixed mul")],
}


def make_dataset(root: Path) -> tuple[Path, Path, Path]:
    """Clones, instances.jsonl and a replay folder of turn scripts under root; returns their paths.

    1 resolved by a scripted fix; 2 not resolved (the script gives up); 3 a repository with no clone;
    4 a test_patch that does not apply; 5 a test that hangs; 6 an unknown base commit.
    """
    repos = root / "repos"
    clone, base = make_repo(repos)
    mul_patch = patch_of(clone, {"tests/test_ops.py": TEST_MUL})
    neg_patch = patch_of(clone, {"tests/test_neg.py": TEST_NEG})
    hang_patch = patch_of(clone, {"tests/test_hang.py": TEST_HANG})
    add_test = ["tests/test_ops.py::test_add"]

    def row(iid: str, problem: str, patch: str, f2p: list[str], repo: str = "acme/mathlib",
            commit: str = base) -> dict[str, Any]:
        return {"instance_id": iid, "repo": repo, "base_commit": commit, "problem_statement": problem,
                "test_patch": patch, "FAIL_TO_PASS": f2p, "PASS_TO_PASS": add_test,
                "environment_setup_commit": base, "hints_text": ""}

    rows = [
        row(IDS[0], "mul(2, 3) returns 5; it should return 6.", mul_patch, ["tests/test_ops.py::test_mul"]),
        row(IDS[1], "neg(4) returns 4; it should return -4.", neg_patch, ["tests/test_neg.py::test_neg"]),
        row(IDS[2], "Something is broken.", mul_patch, [], repo="acme/missing"),
        row(IDS[3], "mul is wrong (and the tests moved).", BAD_PATCH, ["tests/test_ops.py::test_divide"]),
        row(IDS[4], "mul is wrong; a new test sleeps.", hang_patch, ["tests/test_hang.py::test_hang"]),
        row(IDS[5], "mul is wrong at a commit nobody has.", mul_patch, ["tests/test_ops.py::test_mul"],
            commit="0123456789abcdef0123456789abcdef01234567"),
    ]
    instances = root / "instances.jsonl"
    instances.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scripts = root / "scripts"
    scripts.mkdir()
    for iid, turns in SCRIPTS.items():
        (scripts / f"{iid}.json").write_text(json.dumps({"turns": turns}))
    return repos, instances, scripts
