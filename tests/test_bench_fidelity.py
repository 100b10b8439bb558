"""`tao bench fidelity`: a small mixed run must show no difference, escape or crash, and the bench must be
able to fail: a different tree or observation, a sabotaged promotion, an escape and a crash are each
reported, and a nondeterministic command is called unstable, not a difference.

Everything runs for real: real trees, real sessions, a real SpeculationScheduler with real overlays.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.bench import fidelity
from harness.bench.fidelity import Verdict, World, compare, run_cases
from harness.bench.fidelity_tree import Places, Snapshot, build, diff_trees, remove, snapshot
from harness.bench.fidelity_cases import Call, Case, Entry, Outside
from harness.bench.fidelity_kinds import KINDS, nested, case_by_id, generate
from harness.bench.fidelity_world import after_speculation
from harness.speculation.running.scheduler import SpeculationScheduler
from sandbox import Workspace
from tools.base import Observation

SEED = 21
SMALL_RUN = 150  # 25 cases of each kind: about half a minute on a busy 2-core machine
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
async def base() -> AsyncIterator[Path]:
    """A scratch directory where the bench builds its cases (as the command does: not under /tmp)."""
    path = fidelity.scratch_base()
    yield path
    remove(path)


@pytest.fixture(scope="module")
async def small_run() -> AsyncIterator[list[Verdict]]:
    """The verdicts of one small mixed run, shared by the tests that read it."""
    path = fidelity.scratch_base()
    try:
        yield await run_cases(generate(SEED, SMALL_RUN), path)
    finally:
        remove(path)


def failures(verdicts: list[Verdict], name: str) -> str:
    """The failing cases of one class, a line each, for the assertion message."""
    return "\n".join(f"{v.case.id} ({v.case.label}, served: {v.served}): {getattr(v, name)[0]}"
                     for v in verdicts if getattr(v, name))


def simple_case(real: Call, candidate: Call | None = None, **changes: Any) -> Case:
    """A hand-made case over a three-file tree."""
    tree = (Entry("ws", "dir", mode=0o755), Entry("out", "dir", mode=0o755), Entry("home", "dir", mode=0o755),
            Entry("ws/a.py", "file", "x = 1\ny = 2\n"), Entry("ws/b.txt", "file", "b\n"),
            Entry("out/secret.txt", "file", "secret\n"))
    return dataclasses.replace(Case("hand-0000", "valid", "hand", tree, (), candidate or real, real), **changes)


# -- the run itself -------------------------------------------------------------------------------------


async def test_a_small_mixed_run_shows_no_difference(small_run: list[Verdict]) -> None:
    assert not [v for v in small_run if v.differences], failures(small_run, "differences")


async def test_a_small_mixed_run_shows_no_escape(small_run: list[Verdict]) -> None:
    assert not [v for v in small_run if v.escapes], failures(small_run, "escapes")


async def test_a_small_mixed_run_shows_no_crash(small_run: list[Verdict]) -> None:
    assert not [v for v in small_run if v.crashes], failures(small_run, "crashes")


async def test_the_run_covers_every_kind_and_promotes_the_valid_calls(small_run: list[Verdict]) -> None:
    # Without promotions there is nothing to compare: a bench that never promotes would pass every case.
    assert {v.case.kind for v in small_run} == set(KINDS)
    valid = [v for v in small_run if v.case.kind == "valid"]
    promoted = [v for v in valid if v.served is not None]
    assert len(promoted) >= len(valid) * 0.6, failures(valid, "crashes") or [v.case.label for v in valid]


# -- the comparison can fail ----------------------------------------------------------------------------


def test_trees_that_differ_in_any_fact_are_reported() -> None:
    off = Snapshot({"ws/a.py": ("file", 0o644, 0, 0, 1, b"x = 1\n"), "ws/l": ("symlink", "a.py", 0, 0),
                    "ws/d": ("dir", 0o755, 0, 0, 0), "ws/h1": ("file", 0o644, 0, 0, 2, b"h"),
                    "ws/h2": ("file", 0o644, 0, 0, 2, b"h")}, (("ws/h1", "ws/h2"),))
    on = Snapshot({"ws/a.py": ("file", 0o600, 0, 1234, 1, b"x = 2\n"), "ws/l": ("symlink", "b.py", 0, 0),
                   "ws/new": ("file", 0o644, 0, 0, 1, b""), "ws/h1": ("file", 0o644, 0, 0, 1, b"h"),
                   "ws/h2": ("file", 0o644, 0, 0, 1, b"h")}, ())
    lines = diff_trees(on, off)
    for expected in ("ws/a.py: mode", "ws/a.py: gid", "ws/a.py: bytes", "ws/l: target", "ws/new: only in on",
                     "ws/d: only in off", "ws/h1: nlink", "hard links"):
        assert any(line.startswith(expected) for line in lines), (expected, lines)
    assert diff_trees(off, off) == []


def test_a_snapshot_sees_modes_targets_and_broken_hard_links(tmp_path: Path) -> None:
    places = Places(tmp_path, "tao-fid-test-snapshot")
    build(simple_case(Call("read_file", {"path": "a.py"})), places)
    os.link(places.ws / "a.py", places.ws / "a2.py")
    os.symlink("a.py", places.ws / "link")
    before = snapshot(places)
    (places.ws / "b.txt").chmod(0o600)
    (places.ws / "link").unlink()
    os.symlink("b.txt", places.ws / "link")
    (places.ws / "a2.py").unlink()
    (places.ws / "a2.py").write_bytes((places.ws / "a.py").read_bytes())  # same bytes, no longer a hard link
    lines = diff_trees(snapshot(places), before)
    assert any(line.startswith("ws/b.txt: mode") for line in lines), lines
    assert any(line.startswith("ws/link: target") for line in lines), lines
    assert any(line.startswith("hard links") for line in lines), lines


def test_observations_that_differ_in_any_field_are_reported() -> None:
    case = simple_case(Call("read_file", {"path": "a.py"}))
    off = World(seen=[("real 'read_file'", ("same", False, None, 0))])
    for field, seen in (("text", ("other", False, None, 0)), ("is_error", ("same", True, None, 0)),
                        ("exit_code", ("same", False, 1, 0)), ("truncated_chars", ("same", False, None, 3))):
        lines = compare(case, World(seen=[("real 'read_file'", seen)]), off)
        assert lines and field in lines[0], (field, lines)
    assert compare(case, off, off) == []


def test_a_nondeterministic_call_is_judged_by_its_pattern_and_never_stale() -> None:
    call = Call("run_tests", {"command": "date +%s%N"})
    case = simple_case(call, history=(call,), expect=r"\$ date \+%s%N\n[0-9]{19}\n\[exit code 0\]")
    fresh = "$ date +%s%N\n1700000000000000002\n[exit code 0]"
    earlier = ("h0 'run_tests'", ("$ date +%s%N\n1700000000000000001\n[exit code 0]", False, 0, 0))
    off = World(seen=[earlier, ("real 'run_tests'", (fresh, False, 0, 0))])
    assert compare(case, World(seen=[earlier, ("real 'run_tests'", (fresh, False, 0, 0))]), off) == []
    stale = compare(case, World(seen=[earlier, ("real 'run_tests'", earlier[1])]), off)
    assert stale and "stale" in stale[0]
    odd = ("real 'run_tests'", ("$ date +%s%N\nnow\n[exit code 0]", False, 0, 0))
    wrong = compare(case, World(seen=[earlier, odd]), off)
    assert wrong and "no output a real run gives" in wrong[0]


def test_earlier_runs_of_a_nondeterministic_call_are_judged_by_its_pattern_too() -> None:
    call = Call("run_tests", {"command": "date +%s%N"})
    case = simple_case(call, history=(call,), expect=r"\$ date \+%s%N\n[0-9]{19}\n\[exit code 0\]")
    text = "$ date +%s%N\n{}\n[exit code 0]".format
    on = World(seen=[("h0 'run_tests'", (text(1700000000000000001), False, 0, 0)),
                     ("real 'run_tests'", (text(1700000000000000003), False, 0, 0))])
    off = World(seen=[("h0 'run_tests'", (text(1700000000000000002), False, 0, 0)),
                      ("real 'run_tests'", (text(1700000000000000004), False, 0, 0))])
    assert compare(case, on, off) == []


def test_placeholders_are_filled_at_any_depth_a_model_can_send(tmp_path: Path) -> None:
    places = Places(tmp_path, "tao-fid-test-fill")
    filled = places.fill({"path": nested(700, "%WS%/a.py")})
    assert json.dumps(filled).count(f"{places.ws}/a.py") == 1 and "%WS%" not in json.dumps(filled)


async def test_a_mark_in_the_command_itself_is_no_escape() -> None:
    # A multi-line hostile command names the mark in its own text; only its output may count.
    command = "python3 - <<'EOF'\nprint('TAO-ESCAPED:x' if False else 'refused')\nEOF"

    def spec(output: str) -> SimpleNamespace:
        """A finished speculation of `command` that printed `output`."""
        task = asyncio.get_running_loop().create_future()
        task.set_result(Observation(f"$ {command}\n{output}\n[exit code 0]"))
        return SimpleNamespace(task=task, candidate=SimpleNamespace(arguments={"command": command}))

    world = World()
    after_speculation([spec("refused")], world)
    assert world.escapes == []
    after_speculation([spec("TAO-ESCAPED:x")], world)
    assert world.escapes == ["speculation printed: TAO-ESCAPED:x"]


# -- whole cases: sabotage is caught, chance is not blamed ---------------------------------------------
# These tests break the scheduler on purpose (monkeypatched methods): they are about the bench noticing.


async def judged(case: Case, base: Path) -> Verdict:
    """The verdict of one case, run alone."""
    [verdict] = await run_cases([case], base)
    return verdict


async def test_a_promotion_that_returns_something_else_is_a_difference(base: Path, monkeypatch) -> None:
    take = SpeculationScheduler.take

    async def lying_take(self: SpeculationScheduler, call: Any) -> Any:
        """The real take, with one character added to what it promotes."""
        observation = await take(self, call)
        return dataclasses.replace(observation, text=observation.text + "!") if observation is not None else None

    monkeypatch.setattr(SpeculationScheduler, "take", lying_take)
    verdict = await judged(simple_case(Call("read_file", {"path": "a.py"})), base)
    assert verdict.served == "promoted" and verdict.differences, verdict
    assert "text" in verdict.differences[0] and not verdict.unstable


async def test_a_speculation_that_writes_the_real_tree_is_an_escape(base: Path, monkeypatch) -> None:
    run = SpeculationScheduler._run

    async def escaping_run(self: SpeculationScheduler, spec: Any) -> Any:
        """Write the real tree, then run as usual."""
        with open(self.workspace.root / "b.txt", "a") as handle:
            handle.write("written by a speculation\n")
        return await run(self, spec)

    monkeypatch.setattr(SpeculationScheduler, "_run", escaping_run)
    verdict = await judged(simple_case(Call("run_tests", {"command": "cat b.txt"})), base)
    assert any(line.startswith("while speculating: ws/b.txt: bytes") for line in verdict.escapes), verdict


async def test_a_stale_promotion_after_an_edit_behind_taos_back_is_a_difference(base: Path, monkeypatch) -> None:
    # The workspace no longer notices outside changes: the read speculated before the edit is served stale.
    monkeypatch.setattr(Workspace, "refresh", lambda self: self._version)
    call = Call("read_file", {"path": "a.py"})
    verdict = await judged(simple_case(call, history=(Outside("ws/a.py", "z = 3\n"),), late=1), base)
    assert verdict.served == "promoted" and verdict.differences, verdict
    assert "z = 3" in verdict.differences[0]


async def test_an_exception_out_of_the_scheduler_is_a_crash(base: Path, monkeypatch) -> None:
    async def broken_take(self: SpeculationScheduler, call: Any) -> Any:
        """Fail as a bug in the scheduler would."""
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(SpeculationScheduler, "take", broken_take)
    verdict = await judged(simple_case(Call("grep", {"pattern": "x"})), base)
    assert verdict.crashes and "RuntimeError: broken on purpose" in verdict.crashes[0], verdict
    assert verdict.crashes[0].startswith("on world")


async def test_a_nondeterministic_command_is_unstable_not_a_difference(base: Path) -> None:
    # Unknowingly nondeterministic (no pattern given): two real runs differ too, so nothing is blamed on Tao.
    verdict = await judged(simple_case(Call("run_tests", {"command": "od -An -N8 -tx8 /dev/urandom"})), base)
    assert verdict.unstable and not verdict.differences, verdict


# -- the generator and the command ------------------------------------------------------------------------


def test_cases_depend_on_seed_kind_and_number_only() -> None:
    mixed = generate(SEED, 24)
    assert [c.kind for c in mixed[:6]] == list(KINDS)
    assert all(case_by_id(SEED, c.id) == c for c in mixed)
    assert generate(SEED, 4, only="env") == [case_by_id(SEED, f"env-{i:04d}") for i in range(4)]
    assert generate(SEED + 1, 24) != mixed


def test_real_calls_are_what_the_model_parser_can_hand_over() -> None:
    for case in generate(SEED, 300):
        for call in (case.real, case.candidate):
            assert isinstance(call.name, str) and isinstance(call.arguments, dict)
            text = json.dumps(call.arguments)
            assert json.loads(text) == call.arguments or "NaN" in text, (case.id, call)
        json.dumps(case.to_dict(), default=repr)


def test_the_command_prints_the_counts_and_fails_when_they_are_not_zero() -> None:
    result = subprocess.run([sys.executable, "-m", "harness.bench.fidelity", "--case", "valid-0000", "--case",
                             "near-miss-0001", "--seed", str(SEED), "--json"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    report = json.loads(result.stdout)
    assert report["cases"] == 2 and set(report["by_kind"]) == {"valid", "near-miss"}
    for key in ("promoted", "differences", "escapes", "crashes", "unstable", "examples", "machine"):
        assert key in report
    failing = any(report[name] for name in ("differences", "escapes", "crashes"))
    assert result.returncode == (1 if failing else 0), result.stderr


def test_every_generated_link_stays_inside_the_case(tmp_path: Path) -> None:
    """The off world runs real commands as the real user (root here): a generated symlink that leads out of
    the case (a link to `/` once let a real `chmod 600 link` change the machine's root) must never exist."""
    from harness.bench.fidelity_kinds import generate
    from harness.bench.fidelity_tree import Places

    places = Places(tmp_path, "tok")
    for case in generate(5, 400):
        for entry in case.tree:
            if entry.type != "symlink":
                continue
            link = places.root / entry.path
            target = Path(os.path.normpath(link.parent / places.fill(entry.data)))
            assert target == places.root or places.root in target.parents, (case.id, entry.path, entry.data)
