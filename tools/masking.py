"""What varies between two runs of the same tests, masked, so that a re-run whose result did not change reads
byte for byte the same (and its output can be foreseen, compared and cached).

Masked, each by a pattern tied to the runner line it occurs in, as `docs/EVENTS.md` lists:
- durations in runners' summaries and per-test lines (pytest, unittest, go, cargo, jest, vitest, node's
  runner, mocha, rspec, minitest, ExUnit, Maven, Gradle, dotnet, PHPUnit): `<time>`;
- the parts of temporary paths that change from run to run (pytest's `pytest-<n>`, Python's `tmp<random>`,
  Rust's `.tmp<random>`, Go's `TestX<n>` and `go-build<n>`, macOS's `/var/folders/<tmp>/T`), not the
  rest of the path, and never a path inside the workspace (which may itself lie under /tmp);
- process and thread ids (`pid 123`, node's `(node:123)`, Rust's `thread 'x' (123) panicked`): `<pid>`;
- memory addresses (Python's `<X object at 0x7f...>`, 64-bit heap and stack addresses): `0x<addr>`.
Everything else, the order of lines included, is left as the runner printed it.
"""

from __future__ import annotations

import re

_DURATIONS = (
    # pytest: "1 failed, 2 passed in 0.12s", "=== 3 passed in 65.20s (0:01:05) ===", "no tests ran in 0.01s"
    (re.compile(r"(?m)^(.*\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|no tests ran)\b.*?)"
                r" in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d(?:\.\d+)?\))?"), r"\1 in <time>"),
    # pytest --durations: "0.52s call     tests/test_x.py::test_a"
    (re.compile(r"(?m)^\d+(?:\.\d+)?s( +(?:call|setup|teardown) )"), r"<time>\1"),
    # unittest, Django: "Ran 3 tests in 0.001s"
    (re.compile(r"(?m)^(Ran \d+ tests? in )\d+(?:\.\d+)?s"), r"\1<time>"),
    # cargo: "test result: ok. 3 passed; 0 failed; ...; finished in 0.00s", "Finished `test` profile [...] target(s)
    # in 0.52s"
    (re.compile(r"(test result: .*; finished in )\d+(?:\.\d+)?s"), r"\1<time>"),
    (re.compile(r"(?m)^(\s*Finished .*target\(s\) in )(?:\d+m )?\d+(?:\.\d+)?s"), r"\1<time>"),
    # go: "ok  \texample.com/pkg\t0.003s", "FAIL\texample.com/pkg\t0.010s", "--- FAIL: TestX (0.00s)"
    (re.compile(r"(?m)^((?:ok|FAIL)\s+\S+\s+)\d+(?:\.\d+)?s"), r"\1<time>"),
    (re.compile(r"(?m)^(\s*--- (?:PASS|FAIL|SKIP): .*) \(\d+(?:\.\d+)?s\)$"), r"\1 (<time>)"),
    # jest: "Time:        1.234 s, estimated 2 s", "PASS src/a.test.ts (5.123 s)", "✓ adds (3 ms)"
    (re.compile(r"(?m)^(Time:\s+)\d+(?:\.\d+)? ?m?s(?:, estimated \d+(?:\.\d+)? ?m?s)?"), r"\1<time>"),
    (re.compile(r"(?m)^(\s*(?:PASS|FAIL) \S+) \(\d+(?:\.\d+)? ?m?s\)"), r"\1 (<time>)"),
    (re.compile(r"(?m)^(\s*[✓✔✕✗×√]\s.*?) \(\d+(?:\.\d+)? ?m?s\)$"), r"\1 (<time>)"),
    # vitest: " Duration  1.23s (transform 45ms, ...)", "✓ src/a.test.ts (3 tests) 5ms", " Start at  12:34:56"
    (re.compile(r"(?m)^(\s*Duration\s+)\d+(?:\.\d+)?m?s(?: \([^)\n]*\))?"), r"\1<time>"),
    (re.compile(r"(?m)^(\s*[✓✔❯×✗]\s+\S+ \(\d+ tests?(?: \| \d+ \w+)*\)) \d+(?:\.\d+)?m?s$"), r"\1 <time>"),
    (re.compile(r"(?m)^(\s*Start at\s+)\d\d:\d\d:\d\d"), r"\1<time>"),
    # node --test (TAP): "  duration_ms: 2.723109", "# duration_ms 5093.161785"
    (re.compile(r"(?m)^(\s*#? ?duration_ms:? )\d+(?:\.\d+)?$"), r"\1<time>"),
    # mocha: "  3 passing (12ms)"
    (re.compile(r"(?m)^(\s*\d+ passing) \(\d+(?:\.\d+)?m?s\)"), r"\1 (<time>)"),
    # rspec, ExUnit, minitest: "Finished in 0.0123 seconds (files took 0.1 seconds to load)", "Finished in
    # 0.03 seconds (0.00s async, 0.03s sync)", "Finished in 0.001234s, 810.3 runs/s, 810.3 assertions/s."
    (re.compile(r"(?m)^(Finished in )\d+(?:\.\d+)?(?: seconds?|s)(?: \([^)\n]*\))?"
                r"(?:, [\d.]+ runs/s, [\d.]+ assertions/s)?"), r"\1<time>"),
    # Maven: "Tests run: 3, ..., Time elapsed: 0.045 s", "[INFO] Total time:  2.345 s", "[INFO] Finished at: <date>"
    (re.compile(r"(Time elapsed: )\d+(?:\.\d+)? s"), r"\1<time>"),
    (re.compile(r"(?m)^(\[INFO\] Total time:\s+)\d+(?::\d+)*(?:\.\d+)? ?(?:s|min|h)"), r"\1<time>"),
    (re.compile(r"(?m)^(\[INFO\] Finished at: )\S+"), r"\1<time>"),
    # Gradle: "BUILD SUCCESSFUL in 2s", "BUILD FAILED in 1m 3s"
    (re.compile(r"(?m)^(BUILD (?:SUCCESSFUL|FAILED) in )(?:\d+h )?(?:\d+m )?\d+(?:\.\d+)?m?s"), r"\1<time>"),
    # dotnet: "Passed!  - Failed: 0, Passed: 3, ..., Duration: 12 ms - x.dll", "Time Elapsed 00:00:01.23"
    (re.compile(r"(Duration: )\d+(?:\.\d+)? ?m?s"), r"\1<time>"),
    (re.compile(r"(?m)^(Time Elapsed )\d\d:\d\d:\d\d(?:\.\d+)?"), r"\1<time>"),
    # PHPUnit: "Time: 00:01.234, Memory: 6.00 MB"
    (re.compile(r"(?m)^(Time: )\d\d:\d\d(?:\.\d+)?"), r"\1<time>"),
)

_TEMP_PATH = re.compile(r"(?:/private)?(?:/tmp|/var/tmp|/var/folders)/[^\s'\"`():,;<>]*")
_TEMP_PARTS = (
    (re.compile(r"^((?:/private)?/var/folders/)[^/]+/[^/]+/"), r"\1<tmp>/"),  # macOS: /var/folders/ab/<random>/T/
    (re.compile(r"(?<=/)pytest-\d+(?=/|$)"), "pytest-<n>"),  # /tmp/pytest-of-<user>/pytest-<n>/test_x0
    (re.compile(r"(?<=/)tmp[a-z0-9_]{8}(?=[/.]|$)"), "tmp<random>"),  # Python's tempfile: tmpab12cd_3
    (re.compile(r"(?<=/)\.tmp[A-Za-z0-9]{6}(?=/|$)"), ".tmp<random>"),  # Rust's tempfile crate: .tmpAbC123
    (re.compile(r"(?<=[A-Za-z_-])\d{6,}(?=/|$)"), "<n>"),  # Go: /tmp/TestParse1234567890/001, /tmp/go-build123456
)
_PIDS = (
    (re.compile(r"(?i)\b(pid\b[ =:]*)\d+"), r"\1<pid>"),  # "pid 14874", "PID: 12", "pid=3"
    (re.compile(r"\((node|deno|bun):\d+\)"), r"(\1:<pid>)"),  # "(node:12345) ExperimentalWarning: ..."
    (re.compile(r"(thread '[^'\n]*' )\(\d+\)( panicked)"), r"\1(<pid>)\2"),  # Rust 1.9x names the thread id
)
_ADDRESSES = (
    (re.compile(r"( at 0x)[0-9a-fA-F]+"), r"\1<addr>"),  # Python: <Box object at 0x7f3a2144fe10>, <function f at 0x..>
    (re.compile(r"\b0x(?:7f|55|56|c0)[0-9a-f]{8,}\b"), "0x<addr>"),  # 64-bit stack, heap and Go heap addresses
)


def mask_durations(text: str) -> str:
    """Runners' wall-clock durations as `<time>`."""
    for pattern, replacement in _DURATIONS:
        text = pattern.sub(replacement, text)
    return text


def mask_run(text: str, root: str = "") -> str:
    """A test or build run's output with what changes from run to run masked (see the module's docstring);
    paths inside `root`, the workspace, are kept as they are."""
    text = mask_durations(text)
    workspace = root.rstrip("/")

    def temp(match: re.Match[str]) -> str:
        path = match.group()
        if workspace and (path == workspace or path.startswith(workspace + "/")):
            return path
        for pattern, replacement in _TEMP_PARTS:
            path = pattern.sub(replacement, path)
        return path

    if "/tmp/" in text or "/var/" in text:
        text = _TEMP_PATH.sub(temp, text)
    for pattern, replacement in (*_PIDS, *_ADDRESSES):
        text = pattern.sub(replacement, text)
    return text
