"""Approvals: which shell commands ask, what the config files and --yolo set, and headless runs' events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.approval import Answer, ApprovalPolicy, load_policy, needs_approval
from harness.errors import UsageError
from tests.helpers import ROOT, make_calc_repo
from tests.test_tui_support import call


@pytest.mark.parametrize("command", ["ls -la", "cat calc/ops.py | grep add", "git diff", "grep -rn def . 2>/dev/null",
                                     "pytest -q", "python -m pytest tests/test_ops.py"])
def test_reads_and_allow_listed_commands_do_not_ask(command: str) -> None:
    assert not needs_approval(command)


@pytest.mark.parametrize("command", ["touch NOTES", "rm -rf build", "echo hi > out.txt", "pytest > log.txt",
                                     "ls && rm x", "echo $(rm x)", "sed -i s/a/b/ f.py", "pip install requests"])
def test_commands_that_may_change_the_workspace_ask(command: str) -> None:
    assert needs_approval(command)


async def test_policy_decisions_say_who_decided() -> None:
    asked: list[str] = []

    async def ask(command: str) -> Answer:
        asked.append(command)
        return Answer("always") if command == "make" else Answer("deny", "use the Makefile target")

    policy = ApprovalPolicy().with_ask(ask)
    assert await policy.decide("ls") is None
    first, second = await policy.decide("make"), await policy.decide("make")
    assert (first.allow, first.by) == (True, "user") and (second.allow, second.by) == (True, "always")
    denied = await policy.decide("rm -rf build")
    assert (denied.allow, denied.by, denied.message) == (False, "user", "use the Makefile target")
    assert asked == ["make", "rm -rf build"]  # "always" is not asked again
    assert (await ApprovalPolicy(mode="yolo").decide("rm x")).by == "yolo"
    headless = await ApprovalPolicy(headless="deny").decide("rm x")
    assert (headless.allow, headless.by) == (False, "headless")


def test_config_files_and_yolo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repo = tmp_path / "repo"
    repo.mkdir()
    assert load_policy(repo) == ApprovalPolicy()
    user = tmp_path / "config" / "tao" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[approvals]\nallow = ["make test"]\n')
    (repo / ".tao.toml").write_text('[approvals]\nmode = "yolo"\nheadless = "deny"\nallow = ["tox"]\n')
    policy = load_policy(repo)
    assert policy.mode == "ask"  # a repository may not turn on yolo for its own commands
    assert policy.headless == "deny" and {"make test", "tox"} <= set(policy.allow)
    assert not needs_approval("make test -j2", policy.allow) and needs_approval("make clean", policy.allow)
    assert load_policy(repo, yolo=True).mode == "yolo"
    (repo / ".tao.toml").write_text('[approvals]\nheadless = "maybe"\n')
    with pytest.raises(UsageError, match="headless"):
        load_policy(repo)


@pytest.mark.parametrize("config, decision", [("", "allow"), ('[approvals]\nheadless = "deny"\n', "deny")])
def test_headless_runs_follow_the_policy_and_say_so(tmp_path: Path, config: str, decision: str) -> None:
    repo = make_calc_repo(tmp_path)
    (repo / ".tao.toml").write_text(config)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([call("bash", command="touch NOTES"), call("finish", summary="done")]))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    result = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--headless", "--json", "--engine", "replay",
                             "--replay", str(script), "--repo", str(repo), "--no-speculation", "touch a file"],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    [approval] = [e for e in events if e["type"] == "approval"]
    assert (approval["command"], approval["decision"], approval["by"]) == ("touch NOTES", decision, "headless")
    assert (repo / "NOTES").exists() == (decision == "allow")
