"""Test-run rules: which test command comes next, from the runners known and the targets in sight.

A test command is a runner (`pytest`, `python3 tests/runtests.py`, `bin/test`, `go test`, `npx jest`) and
targets. Runners come from the session (the ones it used, latest first) and from the learned model (the
runners many sessions use, with the agent's interpreter filled in), the latter only when the runner's own
script has been seen in this session (in a listing, an output or a command) or its folder has (and no
listing of that folder left the script out). A session that offers Tao's run_tests tool is taken to prefer
the command its description shows over every learned runner. A runner names its targets as paths
(`tests/test_x.py`; `go test` names a file's package, `./pkg`), as dotted labels relative to its folder
(`migrations.test_x`), or not at all (`cargo test` filters by test name). Targets: the test files and
folders just seen or listed, the last run's targets (with another runner, as agents do when a runner is
missing, and widened to the enclosing folder or package), and the test files just written.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from harness.calls.action import TEST, make
from harness.calls.runners import file_target
from harness.calls.canonical import canonical_bash
from harness.speculation.prediction.dataflow import Pool
from harness.speculation.prediction.state import SessionState, is_test_file
from tools.run_tests import EXAMPLE_RUNNER

PY = "{python}"  # the interpreter slot of a learned runner template


@dataclass(frozen=True)
class Runner:
    """A test runner as it is typed, whether it takes dotted labels, and where it came from."""

    command: str
    dotted: bool
    why: str
    sure: bool = True  # the session used it, or its script has been seen (not only its folder)


def template(runner: str) -> str:
    """A runner with its leading Python interpreter replaced by a slot (`python3 -m pytest` -> `{python} -m pytest`)."""
    first, _, rest = runner.partition(" ")
    return f"{PY} {rest}".strip() if posixpath.basename(first).startswith("python") else runner


def script_of(runner: str) -> str | None:
    """The runner's own script inside the workspace (`tests/runtests.py`, `bin/test`), None for installed tools."""
    for word in runner.split():
        if word.startswith(("-", "{")) or "=" in word or posixpath.basename(word).startswith("python"):
            continue
        if word.endswith(".py") or "/" in word:
            return posixpath.normpath(word.removeprefix("./")) if not word.startswith("/") else None
    return None


def is_dotted(runner: str, target: str) -> bool:
    """Whether a target is a dotted label (`queries.test_q`) rather than a path."""
    return "/" not in target and not target.endswith(".py") and "." in target or (
        "/" not in target and script_of(runner) is not None and not target.endswith(".py"))


def runners(state: SessionState, learned: list[dict[str, object]], default_interpreter: str) -> list[Runner]:
    """The session's runners (latest first), then the learned ones whose script is in sight."""
    found = [Runner(r, state.dotted.get(r, False), f"session{i}")
             for i, r in enumerate(reversed(state.test_prefixes[-2:]))]
    python = state.interpreter(default_interpreter)
    known = {template(r.command) for r in found}
    if "run_tests" in state.tools:  # the tool's own example comes before what bash agents type
        learned = [{"runner": template(EXAMPLE_RUNNER), "dotted": False}, *learned]
    for rank, item in enumerate(learned):
        shape = str(item["runner"])
        if shape in known:
            continue
        script = script_of(shape)
        sure = script is None or script in state.seen or script in state.command_words
        folder = posixpath.dirname(script or "")
        if not sure and (folder in state.listed or not _folder_seen(state, folder)):
            continue  # its folder was listed without it, or never seen
        found.append(Runner(shape.replace(PY, python), bool(item.get("dotted")), f"learned{min(rank, 3)}", sure))
        if len(found) >= 4:
            break
    return found


def _folder_seen(state: SessionState, folder: str) -> bool:
    if not folder:
        return False
    return folder in state.seen or folder in state.seen_dirs


def label(runner: Runner, path: str) -> str | None:
    """How `runner` names the test file or folder `path`: the path (`go test`: its package), a label relative to
    its folder, or None when the runner takes no such target (`pytest a.test.ts`, `cargo test`)."""
    if not runner.dotted:
        return file_target(runner.command, path)
    script = script_of(runner.command)
    folder = posixpath.dirname(script) if script else ""
    if folder and not path.startswith(folder + "/"):
        return None
    rel = path[len(folder) + 1:] if folder else path
    return rel.removesuffix(".py").replace("/", ".") or None


def path_of(runner_command: str, target: str) -> str | None:
    """The file a dotted label names (`migrations.test_x` -> `tests/migrations/test_x.py`), else the path."""
    if "/" in target or target.endswith(".py"):
        return target
    script = script_of(runner_command)
    folder = posixpath.dirname(script) if script else ""
    rel = target.replace(".", "/")
    return posixpath.join(folder, rel + ".py") if folder else None


def targets(state: SessionState) -> list[tuple[str, str]]:
    """Test files and folders in sight, as (path, why), most telling first."""
    found: list[tuple[str, str]] = []
    last = state.last
    if last is not None and last.action.kind == "list" and last.action.path:
        found.append((last.action.path, "listed_folder"))
    for step in reversed(state.steps[-3:]):
        why = ("listed" if step.action.kind == "list" else "last") if step is last else "recent"
        names = step.entries or [p for p, _ in step.mentions]
        tests = [p for p in names if is_test_file(p) and not p.startswith("/")]
        if len(tests) > 4:  # a long list: the files whose names match what the session works on (else the first)
            ranked = sorted(range(len(tests)), key=lambda i: (-state.relevance(tests[i]), i))
            matching = [i for i in ranked[:4] if state.relevance(tests[i]) > 0]
            tests = [tests[i] for i in (matching if len(matching) >= 2 else ranked[:2])]
        found += [(p, why) for p in tests]
    found += [(p, "written") for p in list(state.written)[-2:] if is_test_file(p)]
    found += [(p, "relevant") for p, _ in state.relevant_tests(2)]
    return list(dict.fromkeys(found))


def default_suite(state: SessionState, pool: Pool) -> None:
    """Tao's run_tests with no command (the project's own test command), before any run and after edits."""
    if "run_tests" not in state.tools:
        return
    action = make("run_tests", {"command": None}, TEST)
    stats = state.keys.get(action.key)
    if stats is None:
        pool.add(action, "default_suite", {"ds_never": 1.0}, ("run_tests", {}))
    elif stats.edits != state.edits:
        pool.add(action, "default_suite", {"ds_edited": 1.0}, ("run_tests", {}))


def propose(state: SessionState, pool: Pool, learned: list[dict[str, object]], default_interpreter: str) -> None:
    """Test runs: each runner on the targets in sight, the last run again elsewhere, and widened."""
    default_suite(state, pool)
    found = runners(state, learned, default_interpreter)
    if not found:
        return
    in_sight = targets(state)
    for runner in found:
        for path, why in in_sight:
            target = label(runner, path)
            if target and (why != "listed_folder" or runner.dotted or path.count("/") >= 1):
                _add(state, pool, runner, target, "test_in_sight", f"t_{why}", path)
            if runner.dotted and why in ("listed", "listed_folder", "last") and target and "." in target:
                _add(state, pool, runner, target.split(".", 1)[0], "test_app", f"t_app_{why}", path)
    if state.last_test is None:
        return
    last_runner, rest, index = state.last_test
    first = rest.split()[0] if rest.split() else ""
    failed = state.steps[index].ok is False
    for runner in found:
        if runner.command != last_runner and first:
            last_path = path_of(last_runner, first) if is_dotted(last_runner, first) else first
            target = label(runner, last_path) if last_path else None
            if target:
                _add(state, pool, runner, target if len(rest.split()) == 1 else rest.replace(first, target, 1),
                     "test_switch", "t_switch_failed" if failed else "t_switch")
    wider = _widen(first)
    if wider:
        _add(state, pool, Runner(last_runner, False, "session0"), wider, "test_widen", "t_widen")
        if "/" in wider and not wider.endswith(".py"):  # a folder, also as typed with its slash
            _add(state, pool, Runner(last_runner, False, "session0"), wider + "/", "test_widen", "t_widen")


def _widen(target: str) -> str | None:
    """The folder of a test file, the package of a dotted label; None when there is nothing wider."""
    if not target or target.startswith("-"):
        return None
    path = target.split("::", 1)[0]
    if path != target:
        return path
    if "/" in target or target.endswith(".py"):
        return posixpath.dirname(path) if path.endswith(".py") and "/" in path else None
    return target.rsplit(".", 1)[0] if "." in target else None


def _add(state: SessionState, pool: Pool, runner: Runner, target: str, rule: str, why: str,
         path: str | None = None) -> None:
    feats = {why: 1.0, f"t_runner_{runner.why}": 1.0, "t_dotted": float(runner.dotted)}
    if not runner.sure:
        feats["t_unsure"] = 1.0
    script = script_of(runner.command)
    last = state.last
    if script and last is not None and (script in last.entries or any(p == script for p, _ in last.mentions[:12])):
        feats["t_script_in_last"] = 1.0
    if path:
        feats["t_rel"] = min(state.relevance(path), 6) / 3
    pool.add(canonical_bash(f"{runner.command} {target}", state.root), rule, feats)
