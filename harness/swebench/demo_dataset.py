"""A demo dataset for `tao swebench` (and its benchmark): N instances of the bundled calc example.

    python -m harness.swebench.demo_dataset DIR [--instances N]

writes DIR/repos/tao/calc (a git clone whose `add` subtracts), DIR/instances.jsonl (each instance's
test_patch adds a test that fails until `add` is fixed) and DIR/scripts/<instance_id>.json (the
recorded fix of examples/calc.replay.json), then prints the command to run it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NEW_TEST = "\n\ndef test_add_negative():\n    assert add(-2, -3) == -5\n"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=tao", "-c", "user.email=tao@localhost", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def make_demo(root: Path, count: int) -> Path:
    """Build the clone, the instances file and the scripts under root; returns the instances file."""
    clone = root / "repos" / "tao" / "calc"
    shutil.copytree(EXAMPLES / "calc", clone, ignore=shutil.ignore_patterns("__pycache__", "ISSUE.md"))
    _git(clone, "init", "-q")
    _git(clone, "add", "-A")
    _git(clone, "commit", "-qm", "calc")
    base = _git(clone, "rev-parse", "HEAD").strip()
    tests = clone / "tests" / "test_ops.py"
    original = tests.read_text()
    tests.write_text(original + NEW_TEST)
    test_patch = _git(clone, "diff")
    tests.write_text(original)
    recording = json.loads((EXAMPLES / "calc.replay.json").read_text())
    (root / "scripts").mkdir(parents=True, exist_ok=True)
    rows = []
    for n in range(1, count + 1):
        iid = f"tao__calc-{n}"
        rows.append({"instance_id": iid, "repo": "tao/calc", "base_commit": base,
                     "problem_statement": f"{recording['task']} (report {n})", "test_patch": test_patch,
                     "FAIL_TO_PASS": ["tests/test_ops.py::test_add", "tests/test_ops.py::test_add_negative"],
                     "PASS_TO_PASS": ["tests/test_ops.py::test_subtract", "tests/test_ops.py::test_average"]})
        (root / "scripts" / f"{iid}.json").write_text(json.dumps({"turns": recording["turns"]}))
    instances = root / "instances.jsonl"
    instances.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return instances


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.swebench.demo_dataset",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="where to build it (must not exist)")
    parser.add_argument("--instances", type=int, default=8, help="how many instances (default 8)")
    args = parser.parse_args(argv)
    if args.dir.exists():
        print(f"{args.dir} exists; pick a new folder", file=sys.stderr)
        return 2
    instances = make_demo(args.dir, args.instances)
    print(f"tao swebench --instances {instances} --repos {args.dir / 'repos'} --output {args.dir / 'out'} "
          f"--engine replay --replay {args.dir / 'scripts'} --workers 4 --evaluate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
