"""The pieces of `tao swebench` on their own: instance files, patches' files, the run report, the live table."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.swebench.evaluate import files_of
from harness.swebench.instances import load_instances
from harness.swebench.official import run_report
from harness.swebench.progress import BatchProgress

ROW = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc", "problem_statement": "broken",
       "test_patch": "", "FAIL_TO_PASS": '["t.py::test_a"]', "PASS_TO_PASS": [], "created_at": "2024"}


def write(path: Path, *rows: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_hub_style_json_strings_are_test_lists(tmp_path: Path) -> None:
    [instance] = load_instances(write(tmp_path / "i.jsonl", ROW))
    assert instance.fail_to_pass == ["t.py::test_a"] and instance.pass_to_pass == []
    assert instance.extra == {"created_at": "2024"} and "<issue>\nbroken\n</issue>" in instance.task


@pytest.mark.parametrize(("row", "message"), [
    ({**ROW, "instance_id": "../x"}, "may hold only letters"),
    ({**ROW, "FAIL_TO_PASS": "not json"}, "FAIL_TO_PASS is a string but not a JSON list"),
    ({k: v for k, v in ROW.items() if k != "repo"}, "missing field(s) repo"),
    ({**ROW, "PASS_TO_PASS": [1]}, "PASS_TO_PASS must be a list of test ids"),
])
def test_bad_rows_are_named_with_their_line(tmp_path: Path, row: dict, message: str) -> None:
    with pytest.raises(UsageError, match=r"i\.jsonl:2") as info:
        load_instances(write(tmp_path / "i.jsonl", {**ROW, "instance_id": "ok"}, row))
    assert message in str(info.value)


def test_duplicate_ids_and_missing_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="appears twice"):
        load_instances(write(tmp_path / "i.jsonl", ROW, ROW))
    with pytest.raises(UsageError, match="does not exist"):
        load_instances(tmp_path / "nope.jsonl")


def test_files_of_a_patch() -> None:
    patch = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\ndiff --git a/t/y.py b/t/y.py\nnew file mode 100644\n"
    assert files_of(patch) == ["x.py", "t/y.py"]


def test_run_report_counts_each_instance_once() -> None:
    preds = {"a": "diff", "b": "diff", "c": "", "d": ""}
    reports = {"a": {"resolved": True}, "b": {"resolved": False}, "c": {"resolved": False}}
    report = run_report(["a", "b", "c", "d", "e"], preds, reports, setup_errors=["d"])
    assert report["resolved_ids"] == ["a"] and report["unresolved_ids"] == ["b"]
    assert report["empty_patch_ids"] == ["c"] and report["error_ids"] == ["d"]
    assert report["submitted_instances"] == 4 and report["incomplete_ids"] == ["e"]  # no prediction


def test_the_table_shows_nodes_only_when_instances_run_on_a_cluster() -> None:
    out = io.StringIO()
    progress = BatchProgress(2, 0, 2, out, live=False)
    progress.sink("local-1")
    assert [c.header for c in progress.render().columns][:3] == ["instance", "status", "step"]
    progress.started("remote-1", "host-b/1a2b3c4d pid 42")
    assert "remote-1: started on host-b/1a2b3c4d pid 42" in out.getvalue()
    table = progress.render()
    assert [c.header for c in table.columns][:3] == ["instance", "status", "node"]
    assert "host-b/1a2b3c4d pid 42" in list(table.columns[2].cells)


def test_bad_pacing_flags_are_refused_before_the_instances_or_the_engine(tmp_path: Path) -> None:
    """`tao swebench --knee 0` (or --max-wait 0) fails at once with what is wrong, what was expected and what to
    do: before reading the instances (a missing file would be named first) and before opening the engine (a
    socket on 127.0.0.1 that stands for one must never be reached)."""
    import socket
    import subprocess
    import sys

    from tests.helpers import ROOT

    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    base = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    try:
        instances = write(tmp_path / "i.jsonl", ROW)
        for flag, value, given in (("--knee", "0", instances), ("--max-wait", "0", instances),
                                   ("--max-wait", "-5", tmp_path / "none.jsonl")):
            argv = [sys.executable, "-m", "harness.cli", "swebench", "--instances", str(given),
                    "--repos", str(tmp_path), "--output", str(tmp_path / "out"), "--engine", "openai",
                    "--base-url", base, flag, value]
            result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert result.returncode == 2, result.stderr
            assert f"tao: bad pacing flag: {flag} {value} (expected " in result.stderr
            assert "leave the flag out for its default" in result.stderr and "Traceback" not in result.stderr
            with pytest.raises(BlockingIOError):  # nothing ever connected to the engine's address
                server.accept()
        assert not (tmp_path / "out").exists()
    finally:
        server.close()


def test_check_args_names_each_bad_pacing_flag_and_returns_the_policy() -> None:
    import argparse

    from harness.cli import build_parser
    from harness.coscheduler import Pacing
    from harness.swebench.command import check_args

    def args(*flags: str) -> argparse.Namespace:
        return build_parser().parse_args(["swebench", "--instances", "i.jsonl", "--repos", "r", "--output", "o",
                                          *flags])

    assert check_args(args("--knee", "2")) == Pacing(knee=2, kv_tokens=46_000, max_wait=120.0)
    with pytest.raises(UsageError) as info:
        check_args(args("--knee", "0", "--kv-tokens", "0", "--max-wait", "0"))
    assert str(info.value).startswith("bad pacing flags: --knee 0 (expected at least 1")
    assert "--kv-tokens 0 (expected at least 1" in str(info.value) and "--max-wait 0 (expected seconds above 0)" \
        in str(info.value)
