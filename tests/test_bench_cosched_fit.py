"""`tao bench cosched --fit` and `--kv-tokens`: the cut of a hand-made workload to a small window, and the errors.

A session is cut before its first step that outgrows the window, its last kept turn becomes a final answer and
it ends there on the simulated engine; a session with fewer than three steps kept is left out.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness.bench import cosched
from harness.bench import cosched_run as runner
from harness.bench.cosched_fit import FIT_SHARE, first_steps, fit
from harness.bench.recordings import LiveSession
from harness.bench.simtools import Book, RecordedCall
from harness.calls.canonical import canonical
from harness.coscheduler import FCFS
from harness.engine.recorded import Recording, Turn
from harness.engine.sim import PROFILES, SimEngine
from harness.errors import UsageError
from harness.vocabulary import Status
from tests.helpers import flat_profile, virtual

OUTPUT = "x" * 1_000  # each call's answer adds this much to the next prompt


def session(name: str, steps: int) -> tuple[LiveSession, Book]:
    """A session of `steps` read_file calls, each answered with OUTPUT, then a finish."""
    turns, calls = [], []
    for i in range(steps):
        args = {"path": f"{name}/f{i}.py"}
        turns.append(Turn(f"Reading file {i}.\n<tool_call>" + json.dumps({"name": "read_file", "arguments": args})
                          + "</tool_call>"))
        calls.append(RecordedCall(canonical("read_file", args).key, 0, "read_file", OUTPUT, False, 0, 0, 1.0))
    turns.append(Turn('Done.\n<tool_call>{"name": "finish", "arguments": {"summary": ""}}</tool_call>'))
    return LiveSession(name, Recording(turns, f"task {name}"), {}, []), Book(name, calls)


def workload() -> runner.Workload:
    """Three sessions: a long one, a short one that fits whole, and one with too few steps before the cut."""
    made = [session("long", 8), session("short", 2), session("early", 8)]
    return runner.Workload([s for s, _ in made], [b for _, b in made], None)


def window(whole: runner.Workload, steps: int) -> int:
    """A window in which the long session's first `steps` steps fit and the next does not (one character a token)."""
    sizes = whole.prompt_sizes()[0]
    answer = len(whole.sessions[0].recording.turns[steps].text)
    return int((sizes[steps] + answer - 1) / FIT_SHARE)


def test_a_session_is_cut_where_it_outgrows_the_window_and_ends_with_a_final_answer(tmp_path: Path) -> None:
    whole = workload()
    early = whole.sessions[2]  # its task makes every prompt longer: fewer of its steps fit
    whole = replace(whole, sessions=[*whole.sessions[:2], replace(early, recording=replace(
        early.recording, task="t" * 2_500))])
    profile = flat_profile(kv_tokens=65_536, block_size=16, max_seqs=64, max_batched_tokens=65_536,
                           max_model_len=window(whole, 4))
    fitted = fit(whole, profile)

    assert [s.name for s in fitted.workload.sessions] == ["long", "short"]
    assert fitted.dropped == ["early"] and fitted.cut == ["long"]
    long, short = fitted.workload.sessions
    assert len(long.recording.turns) == 4  # steps 0-3 fit, step 4 does not
    last = long.recording.turns[-1].text
    assert last.startswith("Reading file 3.") and '"name": "finish"' in last and "read_file" not in last
    assert len(fitted.workload.books[0].calls) == 3  # the final answer calls no tool
    assert short.recording.turns == whole.sessions[1].recording.turns  # it fits whole: untouched
    assert (fitted.kept_steps, fitted.total_steps) == (4 + 3, 9 + 3 + 9)
    assert not fitted.workload.too_long(profile)

    async def main() -> dict[str, object]:
        engine = SimEngine(profile)
        try:
            return await runner.run_group(engine, fitted.workload, [0, 1], "fcfs", FCFS(), "fit", tmp_path)
        finally:
            await engine.close()

    runs = virtual(main)["sessions"]
    assert isinstance(runs, list)
    assert [(r["status"], r["steps"]) for r in runs] == [(Status.FINISHED, 4), (Status.FINISHED, 3)]


def test_steps_keeps_each_sessions_first_turns_and_ends_it_there(tmp_path: Path) -> None:
    whole = workload()
    cut = first_steps(whole, 3)

    long, short, early = cut.sessions
    assert len(long.recording.turns) == 3 and len(early.recording.turns) == 3
    assert '"name": "finish"' in long.recording.turns[-1].text and "read_file" not in long.recording.turns[-1].text
    assert long.recording.turns[:2] == whole.sessions[0].recording.turns[:2]
    assert [len(b.calls) for b in cut.books] == [2, 2, 2]  # the short one (2 calls, then finish) was already 3 turns
    assert short.recording.turns == whole.sessions[1].recording.turns
    with pytest.raises(UsageError, match="--steps 2: keep at least 3"):
        first_steps(whole, 2)

    async def main() -> dict[str, object]:
        engine = SimEngine(flat_profile(kv_tokens=65_536, block_size=16, max_seqs=64, max_batched_tokens=65_536))
        try:
            return await runner.run_group(engine, cut, [0, 2], "fcfs", FCFS(), "steps", tmp_path)
        finally:
            await engine.close()

    runs = virtual(main)["sessions"]
    assert isinstance(runs, list)
    assert [(r["status"], r["steps"]) for r in runs] == [(Status.FINISHED, 3), (Status.FINISHED, 3)]


def test_a_workload_of_which_nothing_fits_says_so() -> None:
    profile = flat_profile(kv_tokens=65_536, max_model_len=100)
    with pytest.raises(UsageError, match="none of the 3 sessions keeps 3 steps"):
        fit(workload(), profile)


def test_kv_tokens_must_hold_one_window_and_on_the_real_engine_no_more_than_its_cache() -> None:
    with pytest.raises(UsageError, match="at least one whole context.*8192 or more"):
        cosched.run([1], "sim", "cpu", None, None, 1, progress=False, kv_tokens_asked=4_096)
    with pytest.raises(UsageError, match="more than the 46,592 tokens.*only makes the cache smaller"):
        cosched.check_kv_tokens(50_000, PROFILES["cpu"], "embedded")
    cosched.check_kv_tokens(8_192, PROFILES["cpu"], "embedded")
    cosched.check_kv_tokens(400_000, PROFILES["cpu"], "sim")  # the simulator's cache can be any size


def test_k_is_how_many_mean_contexts_the_kv_cache_holds() -> None:
    whole = workload()
    mean, largest = whole.context_tokens(PROFILES["cpu"])
    k = cosched.kv_contexts(replace(PROFILES["cpu"], kv_tokens=mean * 4 + 1), whole)
    assert k == {"mean": mean, "max": largest, "kv_tokens": mean * 4 + 1, "k": 4}
    assert mean < largest


def test_the_tokenizer_cuts_where_the_text_has_fewer_characters_a_token_than_the_profile_says() -> None:
    whole = workload()
    profile = flat_profile(kv_tokens=65_536, max_model_len=window(whole, 4))
    by_chars = fit(whole, profile).workload.sessions[0]
    by_tokens = fit(whole, profile, lambda text: len(text) * 6 // 5).workload.sessions[0]
    assert len(by_tokens.recording.turns) < len(by_chars.recording.turns) == 4
    assert '"name": "finish"' in by_tokens.recording.turns[-1].text
