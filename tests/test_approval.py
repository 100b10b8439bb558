"""Approvals: which shell commands ask, what the config files and --yolo set, and headless runs' events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.approval import Answer, ApprovalPolicy, Request, load_policy, needs_approval, request_for
from harness.engine.recorded import Recording, ReplayEngine, Turn
from harness.errors import UsageError
from harness.events import Approval, Event, ToolResult
from harness.session import Session
from sandbox import Workspace
from tests.helpers import ROOT, make_calc_repo
from tests.test_tui_support import TURNS, call
from tools import default_tools
from tools.base import Effect


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
    told = next(e["output"] for e in events if e["type"] == "tool_result" and e["name"] == "bash")
    assert "did not allow" not in told  # nobody was asked, so the model hears it was the policy
    assert ('headless = "deny"' in told) == (decision == "deny")


@pytest.mark.parametrize("mode, command, edit", [("read-only", False, False), ("ask", "asked", "asked"),
                                                 ("auto-edit", "asked", True), ("full-auto", True, True),
                                                 ("yolo", True, True)])
async def test_modes_settle_commands_and_edits(mode: str, command: bool | str, edit: bool | str) -> None:
    asked: list[str] = []

    async def ask(text: str) -> Answer:
        asked.append(text)
        return Answer("once")

    policy = ApprovalPolicy(mode=mode).with_ask(ask)
    assert await policy.decide("cat README") is None  # reads never ask, whatever the mode
    for text, is_edit, expected in (("touch NOTES", False, command), ("edit_file calc/ops.py", True, edit)):
        verdict = await policy.decide(text, is_edit)
        assert (verdict.allow, verdict.by) == ((True, "user") if expected == "asked" else (expected, mode))
        assert (text in asked) == (expected == "asked")


def test_file_tools_that_change_the_workspace_need_leave() -> None:
    assert request_for("edit_file", {"path": "calc/ops.py", "old": "a", "new": "b"}, Effect.MUTATING) == \
        Request("edit_file calc/ops.py", edit=True)
    assert request_for("write_file", {"path": "NOTES", "content": ""}, Effect.MUTATING) == \
        Request("write_file NOTES", edit=True)
    assert request_for("bash", {"command": "touch x"}, Effect.MUTATING) == Request("touch x", edit=False)
    assert request_for("read_file", {"path": "calc/ops.py"}, Effect.PURE) is None
    assert request_for("run_tests", {}, Effect.SANDBOXED) is None


async def test_refusals_without_asking_name_the_policy_not_the_user() -> None:
    headless = await ApprovalPolicy(headless="deny").decide("rm x")
    assert "user did not allow" not in headless.reason
    assert 'headless = "deny"' in headless.reason and 'headless = "allow"' in headless.reason
    read_only = await ApprovalPolicy(mode="read-only").decide("edit_file a.py", edit=True)
    assert "user did not allow" not in read_only.reason
    assert '"read-only"' in read_only.reason and 'mode = "ask"' in read_only.reason

    async def deny(text: str) -> Answer:
        return Answer("deny", "not now")

    by_user = await ApprovalPolicy().with_ask(deny).decide("rm x")
    assert by_user.reason == "The user did not allow this command, so it was not run. They said: not now"


def test_a_repository_may_tighten_the_mode_but_never_loosen_it(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    user = tmp_path / "config" / "tao" / "config.toml"
    user.parent.mkdir(parents=True)
    repo = tmp_path / "repo"
    repo.mkdir()
    user.write_text('[approvals]\nmode = "auto-edit"\nheadless = "deny"\n')
    (repo / ".tao.toml").write_text('[approvals]\nmode = "read-only"\nheadless = "allow"\n')
    assert (load_policy(repo).mode, load_policy(repo).headless) == ("read-only", "deny")
    (repo / ".tao.toml").write_text('[approvals]\nmode = "full-auto"\n')
    assert load_policy(repo).mode == "auto-edit"
    user.write_text('[approvals]\nmode = "sometimes"\n')
    with pytest.raises(UsageError, match="auto-edit"):
        load_policy(repo)


async def test_edits_ask_and_a_denial_reaches_the_model_and_the_trajectory(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path)
    before = (repo / "calc" / "ops.py").read_text()
    asked: list[str] = []

    async def deny(text: str) -> Answer:
        asked.append(text)
        return Answer("deny", "keep the subtraction")

    events: list[Event] = []
    engine = ReplayEngine(Recording([Turn(TURNS[2]), Turn(call("finish", summary="left alone"))]))
    session = Session("fix add", engine, Workspace(repo), default_tools(), sinks=[events.append],
                      approval=ApprovalPolicy().with_ask(deny))
    await session.run()
    assert asked == ["edit_file calc/ops.py"]
    [approval] = [e for e in events if isinstance(e, Approval)]
    assert (approval.command, approval.decision, approval.by, approval.message) == (
        "edit_file calc/ops.py", "deny", "user", "keep the subtraction")
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.is_error and result.output.endswith("They said: keep the subtraction")
    assert (repo / "calc" / "ops.py").read_text() == before


def test_the_command_line_mode_overrides_the_config_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".tao.toml").write_text('[approvals]\nmode = "read-only"\nallow = ["tox"]\n')
    policy = load_policy(repo, mode="auto-edit")  # the user's own choice for this run
    assert policy.mode == "auto-edit" and "tox" in policy.allow
    assert load_policy(repo, yolo=True, mode="ask").mode == "yolo"
    with pytest.raises(UsageError, match="--mode takes one of read-only, ask"):
        load_policy(repo, mode="sometimes")
