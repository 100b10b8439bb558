"""`@path` mentions: which words are mentions, what is attached, and what the user is told when it cannot be."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.events import Attached, read_trajectory
from harness.history import rebuild
from harness.mentions import expand, mentions
from tests.helpers import ROOT, make_calc_repo


def test_mentions_are_words_starting_with_at_not_mail_addresses() -> None:
    text = "see @calc/ops.py, and @README.md. Mail bob@example.com about @property (@calc/ops.py again)"
    assert mentions(text) == ["calc/ops.py", "README.md", "property"]


def test_a_mentioned_file_is_attached_and_problems_are_told(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    (tmp_path / "secret.txt").write_text("a secret\n")
    (repo / "blob.bin").write_bytes(b"\0\1\2")
    expansion = expand("fix @calc/ops.py; see @nope.py @../secret.txt @calc @blob.bin @property", repo)
    assert expansion.files == ["calc/ops.py"]
    assert '<file path="calc/ops.py">' in expansion.content and "def add" in expansion.content
    assert "a secret" not in expansion.content
    notes = "\n".join(expansion.notes)
    assert "@nope.py: no such file" in notes and "@../secret.txt is outside the repository" in notes
    assert "@calc is a directory" in notes and "@blob.bin is a binary file" in notes and "property" not in notes
    assert "@nope.py: no such file" in expansion.content  # the model is told too


def test_a_long_file_is_cut_and_the_cut_is_said(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    (repo / "long.txt").write_text("x" * 500)
    expansion = expand("@long.txt", repo, max_file=100)
    assert expansion.notes == ["@long.txt is 500 characters long; its first 100 were attached"]
    assert "x" * 100 in expansion.content and "x" * 101 not in expansion.content
    assert "the file has 500 characters" in expansion.content
    assert expand("no mention here", repo).content == ""


def test_headless_run_attaches_the_file_and_a_resume_rebuilds_it(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([f'<tool_call>{json.dumps({"name": "finish", "arguments": {"summary": "ok"}})}'
                                  '</tool_call>']))
    trajectory = tmp_path / "run.jsonl"
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--headless", "--repo", str(repo),
                           "--engine", "replay", "--replay", str(script), "--trajectory", str(trajectory),
                           "--no-speculation", "@calc/ops.py: why does it subtract? see @missing.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "@missing.py: no such file" in done.stderr  # the headless log says what was not attached
    events = read_trajectory(trajectory)
    [attached] = [e for e in events if isinstance(e, Attached)]
    assert attached.files == ["calc/ops.py"] and "def add" in attached.content
    assert events[0].task == "@calc/ops.py: why does it subtract? see @missing.py"  # as typed, not a task file
    first = rebuild(events, native_tools=False).messages[0]["content"]
    assert first.startswith("@calc/ops.py: why") and '<file path="calc/ops.py">' in first
