"""Observations made comparable: two runs of the same tests that differ only in durations, temporary paths,
process ids or addresses read the same once masked; a different result never does. Real runs where the
runner is installed (pytest always, node and cargo when present), else output recorded from real runs."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox import Workspace
from tools import RunTests, run_tool
from tools.masking import mask_run

# Two runs each, as the runners printed them (only durations, temp paths, pids and addresses differ).
SAME = {
    "pytest": (
        "tmp_path = PosixPath('/tmp/pytest-of-root/pytest-66/test_tmp0')\n"
        "E       AssertionError: in /tmp/pytest-of-root/pytest-66/test_tmp0 pid 14874\n"
        "E       assert <test_a.Box object at 0x7f3a2144fe10> is None\n"
        "FAILED tests/test_a.py::test_obj - assert <test_a.Box object at 0x7f3a2144fe1...\n"
        "2 failed in 86.24s (0:01:26)\n",
        "tmp_path = PosixPath('/tmp/pytest-of-root/pytest-68/test_tmp0')\n"
        "E       AssertionError: in /tmp/pytest-of-root/pytest-68/test_tmp0 pid 16180\n"
        "E       assert <test_a.Box object at 0x7f01221f7c50> is None\n"
        "FAILED tests/test_a.py::test_obj - assert <test_a.Box object at 0x7f01221f7c5...\n"
        "2 failed in 112.86s (0:01:52)\n"),
    "unittest": ("..F\nRan 3 tests in 0.012s\n\nFAILED (failures=1)\n",
                 "..F\nRan 3 tests in 0.104s\n\nFAILED (failures=1)\n"),
    "go": (
        "--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 3, want 4\n"
        "    t.TempDir: /tmp/TestParse2871553468/001\n"
        "FAIL\nFAIL\texample.com/app/parse\t0.004s\nok  \texample.com/app/lex\t0.012s\n"
        "panic: boom\ngoroutine 7 [running]:\nexample.com/app/parse.f(0xc000012345)\n",
        "--- FAIL: TestParse (0.01s)\n    parse_test.go:12: got 3, want 4\n"
        "    t.TempDir: /tmp/TestParse1093847110/001\n"
        "FAIL\nFAIL\texample.com/app/parse\t0.006s\nok  \texample.com/app/lex\t0.009s\n"
        "panic: boom\ngoroutine 7 [running]:\nexample.com/app/parse.f(0xc0000a2008)\n"),
    "cargo": (
        "    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.10s\n"
        "thread 'tests::adds' (14426) panicked at src/lib.rs:4:25:\nat 0x55fc42cb4090\n"
        "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.70s\n",
        "    Finished `test` profile [unoptimized + debuginfo] target(s) in 1m 02s\n"
        "thread 'tests::adds' (15012) panicked at src/lib.rs:4:25:\nat 0x5611aa0b1c20\n"
        "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n"),
    "jest": (
        "(node:48213) ExperimentalWarning: VM Modules is an experimental feature\n"
        "FAIL src/a.test.ts (5.123 s)\n  ✓ adds (3 ms)\n  ✕ subs (12 ms)\n"
        "Tests:       1 failed, 1 passed, 2 total\nTime:        6.01 s, estimated 7 s\n",
        "(node:50991) ExperimentalWarning: VM Modules is an experimental feature\n"
        "FAIL src/a.test.ts (4.87 s)\n  ✓ adds (2 ms)\n  ✕ subs (9 ms)\n"
        "Tests:       1 failed, 1 passed, 2 total\nTime:        5.2 s\n"),
    "vitest": (
        " ✓ src/a.test.ts (3 tests) 5ms\n\n Test Files  1 passed (1)\n      Tests  3 passed (3)\n"
        "   Start at  12:34:56\n   Duration  1.23s (transform 45ms, setup 0ms, collect 67ms, tests 5ms)\n",
        " ✓ src/a.test.ts (3 tests) 7ms\n\n Test Files  1 passed (1)\n      Tests  3 passed (3)\n"
        "   Start at  12:41:02\n   Duration  980ms (transform 40ms, setup 0ms, collect 60ms, tests 7ms)\n"),
    "node --test": ("ok 1 - adds\n  ---\n  duration_ms: 2.723109\n  ...\n# pass 1\n# duration_ms 5093.161785\n",
                    "ok 1 - adds\n  ---\n  duration_ms: 0.9\n  ...\n# pass 1\n# duration_ms 61.2\n"),
    "mocha": ("  ✔ adds\n  ✔ parses (105ms)\n\n  2 passing (120ms)\n",
              "  ✔ adds\n  ✔ parses (98ms)\n\n  2 passing (1s)\n"),
    "rspec": ("..F\n\nFinished in 0.01234 seconds (files took 0.1234 seconds to load)\n3 examples, 1 failure\n",
              "..F\n\nFinished in 0.2 seconds (files took 1.02 seconds to load)\n3 examples, 1 failure\n"),
    "minitest": ("Finished in 0.001234s, 810.3728 runs/s, 810.3728 assertions/s.\n1 runs, 1 assertions, 0 failures\n",
                 "Finished in 0.002s, 500.0 runs/s, 500.0 assertions/s.\n1 runs, 1 assertions, 0 failures\n"),
    "mix": ("...\nFinished in 0.03 seconds (0.00s async, 0.03s sync)\n3 tests, 0 failures\n",
            "...\nFinished in 0.1 seconds (0.02s async, 0.08s sync)\n3 tests, 0 failures\n"),
    "maven": (
        "[INFO] Tests run: 3, Failures: 0, Errors: 0, Skipped: 0, Time elapsed: 0.045 s - in com.x.AppTest\n"
        "[INFO] BUILD SUCCESS\n[INFO] Total time:  2.345 s\n[INFO] Finished at: 2026-12-06T09:30:01Z\n",
        "[INFO] Tests run: 3, Failures: 0, Errors: 0, Skipped: 0, Time elapsed: 0.051 s - in com.x.AppTest\n"
        "[INFO] BUILD SUCCESS\n[INFO] Total time:  01:02 min\n[INFO] Finished at: 2026-12-06T09:41:17Z\n"),
    "gradle": ("> Task :app:test\n\nBUILD SUCCESSFUL in 2s\n4 actionable tasks: 2 executed, 2 up-to-date\n",
               "> Task :app:test\n\nBUILD SUCCESSFUL in 1m 3s\n4 actionable tasks: 2 executed, 2 up-to-date\n"),
    "dotnet": ("Passed!  - Failed: 0, Passed: 3, Skipped: 0, Total: 3, Duration: 12 ms - App.Tests.dll\n"
               "Time Elapsed 00:00:01.23\n",
               "Passed!  - Failed: 0, Passed: 3, Skipped: 0, Total: 3, Duration: 1.2 s - App.Tests.dll\n"
               "Time Elapsed 00:00:03.40\n"),
    "phpunit": ("OK (3 tests, 3 assertions)\nTime: 00:01.234, Memory: 6.00 MB\n",
                "OK (3 tests, 3 assertions)\nTime: 00:00.087, Memory: 6.00 MB\n"),
    "python tempfile": ("wrote /tmp/tmpab12cd_3/out.json and /tmp/tmpx9y8z7w6.py\n",
                        "wrote /tmp/tmpqq01rr23/out.json and /tmp/tmp0k1l2m3n.py\n"),
    "macOS": ("open /var/folders/3x/k2j4h5g6_abc/T/pytest-of-me/pytest-3/test_a0/x\n",
              "open /var/folders/3x/zz9yy8xx_def/T/pytest-of-me/pytest-4/test_a0/x\n"),
}

# The same runs with another result: never equal once masked.
DIFFERENT = {
    "pytest": ("1 failed, 2 passed in 0.12s\n", "3 passed in 0.12s\n"),
    "go": ("--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 3, want 4\n",
           "--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 5, want 4\n"),
    "cargo": ("test result: FAILED. 2 passed; 1 failed; finished in 0.70s\n",
              "test result: ok. 3 passed; 0 failed; finished in 0.70s\n"),
    "jest": ("Tests:       1 failed, 1 passed, 2 total\nTime:        6.01 s\n",
             "Tests:       2 passed, 2 total\nTime:        6.01 s\n"),
    "hash values": ("expected 0x1234abcd5678ef90, got 0x1234abcd5678ef91\n",
                    "expected 0x1234abcd5678ef90, got 0x1234abcd5678ef90\n"),
    "a fixed temp file": ("cannot open /tmp/app/config.json\n", "cannot open /tmp/app/config.yaml\n"),
    "a workspace under /tmp": ("tests/test_a.py:5 in /tmp/ws/pytest-1/x.py\n",
                               "tests/test_a.py:5 in /tmp/ws/pytest-2/x.py\n"),
}


@pytest.mark.parametrize("runner", SAME)
def test_two_runs_with_the_same_result_read_the_same(runner: str) -> None:
    first, second = SAME[runner]
    assert first != second
    assert mask_run(first, "/home/u/proj") == mask_run(second, "/home/u/proj")


@pytest.mark.parametrize("case", DIFFERENT)
def test_a_different_result_never_reads_the_same(case: str) -> None:
    first, second = DIFFERENT[case]
    assert mask_run(first, "/tmp/ws") != mask_run(second, "/tmp/ws")


def test_what_is_masked_keeps_the_rest_of_the_line() -> None:
    masked = mask_run(SAME["pytest"][0], "/home/u/proj")
    assert "PosixPath('/tmp/pytest-of-root/pytest-<n>/test_tmp0')" in masked
    assert "in /tmp/pytest-of-root/pytest-<n>/test_tmp0 pid <pid>" in masked
    assert "<test_a.Box object at 0x<addr>> is None" in masked
    assert masked.endswith("2 failed in <time>\n")
    assert mask_run("go: /tmp/TestParse2871553468/001\n") == "go: /tmp/TestParse<n>/001\n"


def test_paths_inside_the_workspace_are_kept_even_under_tmp() -> None:
    text = "/tmp/pytest-of-u/pytest-7/test_a0/ws/tests/test_x.py:3: in test_x\n"
    assert mask_run(text, "/tmp/pytest-of-u/pytest-7/test_a0/ws") == text
    assert mask_run(text, "/srv/ws") == "/tmp/pytest-of-u/pytest-<n>/test_a0/ws/tests/test_x.py:3: in test_x\n"


# Real runs through Tao's run_tests.

FLAKY_BY_DESIGN = {
    "conftest.py": "",
    "tests/test_noise.py": (
        "import os, time\n\nclass Box:\n    pass\n\n"
        "def test_noise(tmp_path):\n    time.sleep(0.01)\n"
        "    assert (tmp_path / 'x').exists(), f'{tmp_path} pid {os.getpid()} {Box()!r}'\n"),
}


async def _twice(root: Path, files: dict[str, str], command: str) -> tuple[str, str]:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    first = await run_tool(RunTests(timeout=600), {"command": command}, Workspace(root))
    second = await run_tool(RunTests(timeout=600), {"command": command}, Workspace(root))
    return first.text, second.text


async def test_a_real_pytest_rerun_reads_the_same_byte_for_byte(tmp_path: Path) -> None:
    command = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -rN -p no:cacheprovider"
    first, second = await _twice(tmp_path / "ws", FLAKY_BY_DESIGN, command)
    assert "pid <pid>" in first and "object at 0x<addr>" in first, first
    if tempfile.gettempdir() in ("/tmp", "/var/tmp"):  # pytest's numbered folders lie there
        assert "pytest-<n>" in first, first
    assert first == second
    changed = {**FLAKY_BY_DESIGN, "tests/test_noise.py": FLAKY_BY_DESIGN["tests/test_noise.py"].replace("'x'", "'y'")}
    other, _ = await _twice(tmp_path / "ws2", changed, command)
    assert other != first.replace(str(tmp_path / "ws"), str(tmp_path / "ws2"))


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_a_real_node_test_rerun_reads_the_same_byte_for_byte(tmp_path: Path) -> None:
    files = {"package.json": '{"name": "tiny", "version": "1.0.0", "scripts": {"test": "node --test"}}',
             "test/a.test.js": "const test = require('node:test'); const assert = require('node:assert');\n"
                               "test('adds', () => { assert.strictEqual(1 + 1, 2); });\n"
                               "test('subs', () => { assert.strictEqual(2 - 1, 2); });\n"}
    first, second = await _twice(tmp_path / "js", files, "node --test")
    assert "duration_ms: <time>" in first and "[exit code 1]" in first, first
    assert first == second


@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed")
async def test_a_real_cargo_test_rerun_reads_the_same_byte_for_byte(tmp_path: Path) -> None:
    files = {"Cargo.toml": '[package]\nname = "tiny"\nversion = "0.1.0"\nedition = "2021"\n',
             "src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 { a - b }\n#[cfg(test)]\nmod tests {\n"
                           "    #[test] fn adds() { assert_eq!(super::add(2, 2), 4); }\n"
                           "    #[test] fn addr() { let x = Box::new(1); println!(\"at {:p}\", &*x); }\n}\n"}
    command = "RUST_BACKTRACE=0 cargo test --offline -q -- --test-threads=1 --show-output"
    first, second = await _twice(tmp_path / "rs", files, command)
    if "error: " in first and "test result" not in first:
        pytest.skip(f"cargo cannot build offline here: {first[-400:]}")
    assert "finished in <time>" in first and "at 0x<addr>" in first, first
    assert first == second
