"""`tao sandbox check`, `tao sandbox run` and `tao bench sandbox`, through their argparse wiring."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from harness import cli_sandbox
from harness.bench import sandbox as bench_sandbox
from tests.test_sandbox_support import make_repo, state_base, tree_state  # noqa: F401


@pytest.fixture(autouse=True)
def private_state(state_base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAO_OVERLAY_DIR", str(state_base))


def invoke(*argv: str) -> int:
    """Parse like `tao` would after the lead wires register() into harness/cli.py."""
    parser = argparse.ArgumentParser(prog="tao")
    sub = parser.add_subparsers(dest="cmd", required=True)
    cli_sandbox.register(sub)
    bench = sub.add_parser("bench").add_subparsers(dest="bench", required=True)
    bench_sandbox.register(bench)
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def test_check_json_names_a_working_backend(capsys: pytest.CaptureFixture[str]) -> None:
    assert invoke("sandbox", "check", "--json", "--repeat", "1") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] in ("overlayfs", "fuse-overlayfs", "git-worktree", "copy")
    assert report["create_ms"] >= 0
    names = [b["name"] for b in report["backends"]]
    assert names == ["overlayfs", "fuse-overlayfs", "git-worktree", "copy"]
    assert all(b["reason"] for b in report["backends"] if not b["available"])


def test_check_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    assert invoke("sandbox", "check", "--repeat", "1") == 0
    out = capsys.readouterr().out
    assert out.startswith("backend: ") and "copy" in out


def test_run_shows_output_and_what_would_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_repo(tmp_path / "ws")
    before = tree_state(root)
    code = invoke("sandbox", "run", "--repo", str(root), "--",
                  "sh", "-c", "echo out; echo x > made.txt; rm README.md; exit 4")
    captured = capsys.readouterr()
    assert code == 4
    assert captured.out == "out\n"
    assert "created   file     made.txt" in captured.err and "deleted   file     README.md" in captured.err
    assert tree_state(root) == before


def test_run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_repo(tmp_path / "ws")
    assert invoke("sandbox", "run", "--json", "--repo", str(root), "--backend", "copy", "--", "touch", "t") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == "copy" and report["exit_code"] == 0
    assert report["changes"] == [{"path": "t", "kind": "created", "type": "file",
                                  "source": report["changes"][0]["source"]}]


def test_run_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert invoke("sandbox", "run", "--repo", str(tmp_path)) == 2
    assert "give a command" in capsys.readouterr().err
    assert invoke("sandbox", "run", "--repo", str(tmp_path), "--", "tao-no-such-program") == 127
    assert "No such file" in capsys.readouterr().err


def test_bench_prints_json_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert invoke("bench", "sandbox", "--sizes", "20", "--repeat", "1", "--backends", "overlayfs,copy") == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert {r["backend"] for r in report["results"]} <= {"overlayfs", "copy"}
    assert {r["watch"] for r in report["refresh"]} == {"inotify", "stat"}
    assert "files" in captured.err


def test_run_reports_taints_in_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_repo(tmp_path / "ws")
    name = f"/tmp/tao-cli-taint-{tmp_path.name}"
    assert invoke("sandbox", "run", "--json", "--repo", str(root), "--", "sh", "-c", f"echo x > {name}") == 0
    report = json.loads(capsys.readouterr().out)
    assert any(name in t for t in report["taints"]), report
    assert invoke("sandbox", "run", "--repo", str(root), "--", "sh", "-c", f"echo x > {name}") == 0
    assert f"tainted: wrote outside the workspace: {name}" in capsys.readouterr().err
    assert invoke("sandbox", "run", "--repo", str(root), "--", "true") == 0
    assert "not tainted" in capsys.readouterr().err
    assert not Path(name).exists()
