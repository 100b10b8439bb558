"""`tao bench live --engine embedded`: observation warming (AOSpec) on the real engine.

One in-process vLLM engine with the embedded model serves the whole run. Each recorded session of
examples/sessions is replayed through `ForcedReplayEngine` over it (every answer forced, greedily, to
the recorded text), against a fresh copy of its real repository with the real tools: the conversation
is fixed, while prefill, decode and the prefix cache are the engine's own. Speculation is on in every
mode (Tao's analyzer, as `on` in the replay benchmark); the modes differ in observation warming only:

- `nowarm`: `SessionOptions(warm=False)`;
- `warm`: `SessionOptions(warm=True)`: while a test run repeats, the next prompt on the output it gave
  last time is pre-filled at the lowest priority;
- `provisional` (with `--provisional`): the next Think step itself starts on that guess.

Repetitions interleave the modes, rotating their order. No run may profit from another's prefix cache:
each run's task message starts with its own nonce (`Run 12345678.`, a fixed eight digits, so every run
has the same token count), so that nothing past the system prompt is shared between runs. The system
prompt, identical in every run of a session (same tools, same path), is pre-filled once per session
before anything is timed, so every run finds it cached alike.

Reported for each step that follows a tool call: time to first token (`llm_end.ttft`, from submission
to the engine), the session's wait for it (`llm_start` to `llm_first_token`: what a provisional step
adopted on a right guess shortens; its `ttft` is the provisional request's own), prompt and cached
tokens, and the guess on the tool's output: `matched` (a repeated test run printed what it printed
last time), `mismatched`, or `none` (no guess: not a test run, a first run, or promoted from a
speculation, whose output is there at once), with the lengths of the guess and of the real output
(a long wrong guess is a long warm prefill the real request may wait behind).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from harness.bench import recordings as recorded
from harness.bench.live_parts import analyzer_for, bench_environment, model_choice, quantile, timed_run
from harness.bench.report import Report, Table
from harness.calls.canonical import canonical
from harness.engine.api import Engine, LLMRequest
from harness.engine.recorded import ForcedReplayEngine
from harness.errors import UsageError
from harness.machine import machine
from harness.events import (Event, LLMEnd, LLMFirstToken, LLMStart, SessionStart, SpecObsSettle, SpecObsWarm,
                            SpecPromote, ToolCall, ToolResult, comparable)
from harness.launch import SessionOptions, open_session
from harness.session import Session, SessionConfig
from harness.speculation.running.records import Budget
from harness.speculation.running.last_run import LastRun
from harness.vocabulary import Status
from sandbox import Workspace

MODES = ("nowarm", "warm", "provisional")
GUESSES = ("matched", "mismatched", "none")


def nonce_task(task: str, nonce: int) -> str:
    """The task as the model sees it in one run: a per-run nonce first, so no other run shares its prefix."""
    return f"Run {nonce:08d}.\n{task}"


def order(modes: list[str], rep: int, index: int) -> list[str]:
    """The modes of one session in one repetition, rotated so that none always runs first."""
    shift = (rep + index) % len(modes)
    return modes[shift:] + modes[:shift]


# -- what one run's events say ----------------------------------------------------------------------

def after_tool_steps(events: list[Event]) -> list[dict[str, Any]]:
    """Each model turn that follows a tool call: its timing, cache use and the guess on that tool's output.

    The guess is derived as the session derives it (harness.speculating.warm_up and `LastRun.guess`, which
    the scheduler's `last_output` uses): a sandboxed call, not promoted, whose same call ran before (and
    did not fail, if the tree changed since); `matched` when its output equals the last one. In warming
    runs, `settled` is what the spec_obs_settle event said.
    """
    root = next((e.repo for e in events if isinstance(e, SessionStart)), "")
    promoted = {e.call_id for e in events if isinstance(e, SpecPromote)}
    settled = {e.call_id: e for e in events if isinstance(e, SpecObsSettle)}
    calls: dict[str, ToolCall] = {}
    last: dict[str, LastRun] = {}  # canonical key -> its last run
    version = 0  # the workspace version as of the latest tool result
    previous: dict[int, dict[str, Any]] = {}  # step -> its (last) tool call's guess
    starts: dict[int, float] = {}
    firsts: dict[int, float] = {}
    rows = []
    for event in events:
        if isinstance(event, ToolCall):
            calls[event.call_id] = event
        elif isinstance(event, ToolResult) and event.call_id in calls:
            call = calls[event.call_id]
            key = canonical(call.name, call.arguments, root).key
            seen = last[key].guess(call.name, version) if key in last else None
            guess, guess_chars = "none", None
            if call.effect == "sandboxed" and event.call_id not in promoted and seen is not None:
                guess, guess_chars = "matched" if seen == event.output else "mismatched", len(seen)
            settle = settled.get(event.call_id)
            previous[event.step] = {"tool": call.name, "guess": guess, "duration": event.duration,
                                    "output_chars": len(event.output),  # a long wrong guess costs the most
                                    "guess_chars": guess_chars,
                                    "settled": None if settle is None else settle.matched,
                                    "warmed_tokens": None if settle is None else settle.warmed_tokens}
            if call.effect not in ("mutating", "unknown"):
                last[key] = LastRun.of(call.name, event)
            version = event.workspace_version
        elif isinstance(event, LLMStart):
            starts[event.step] = event.t
        elif isinstance(event, LLMFirstToken):
            firsts[event.step] = event.t
        elif isinstance(event, LLMEnd) and event.step - 1 in previous:
            wait = firsts[event.step] - starts[event.step] if event.step in firsts and event.step in starts else None
            rows.append({"step": event.step, **previous[event.step - 1], "ttft": event.ttft, "wait": wait,
                         "prompt_tokens": event.prompt_tokens, "cached_tokens": event.cached_tokens})
    return rows


def run_record(events: list[Event], session: str, mode: str, rep: int, seconds: float, status: str,
               steps: int) -> dict[str, Any]:
    """One run, as the summary reads it."""
    ends = [e for e in events if isinstance(e, LLMEnd)]
    settles = [e for e in events if isinstance(e, SpecObsSettle)]
    trace = json.dumps(comparable(events), sort_keys=True, default=str)  # forced answers take fixed tokens
    return {"session": session, "mode": mode, "rep": rep, "seconds": round(seconds, 4), "status": status,
            "steps": steps, "after_tool": after_tool_steps(events),
            "prompt_tokens": sum(e.prompt_tokens for e in ends), "cached_tokens": sum(e.cached_tokens for e in ends),
            "output_tokens": [e.output_tokens for e in ends],
            # the first prompt finds only the primed system prompt cached, never another run's task (the nonce)
            "first_step": {"prompt_tokens": ends[0].prompt_tokens if ends else 0,
                           "cached_tokens": ends[0].cached_tokens if ends else 0},
            "warms": sum(isinstance(e, SpecObsWarm) for e in events),
            "matched": sum(e.matched for e in settles), "mismatched": sum(not e.matched for e in settles),
            "promoted": sum(isinstance(e, SpecPromote) for e in events),
            "trace": hashlib.sha256(trace.encode()).hexdigest()[:16]}


# -- arithmetic -------------------------------------------------------------------------------------

def _stats(values: list[float | None]) -> dict[str, Any]:
    kept = [v for v in values if v is not None]
    return {"n": len(kept), "mean": round(sum(kept) / len(kept), 4) if kept else None,
            "p50": round(quantile(kept, 0.5), 4) if kept else None}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def mode_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's runs: TTFT and wait after tool calls (all, and by guess), cache hits, time, guesses."""
    rows = [row for run in runs for row in run["after_tool"]]
    prompt = sum(row["prompt_tokens"] for row in rows)
    out: dict[str, Any] = {
        "runs": len(runs), "seconds": _stats([r["seconds"] for r in runs]),
        "ttft": _stats([row["ttft"] for row in rows]), "wait": _stats([row["wait"] for row in rows]),
        "by_guess": {g: {"ttft": _stats([r["ttft"] for r in rows if r["guess"] == g]),
                         "wait": _stats([r["wait"] for r in rows if r["guess"] == g])} for g in GUESSES},
        "cache_hit": _ratio(sum(r["cached_tokens"] for r in runs), sum(r["prompt_tokens"] for r in runs)) or 0.0,
        "cache_hit_after_tool": _ratio(sum(row["cached_tokens"] for row in rows), prompt) or 0.0,
        "warms": sum(r["warms"] for r in runs), "matched": sum(r["matched"] for r in runs),
        "mismatched": sum(r["mismatched"] for r in runs), "promoted": sum(r["promoted"] for r in runs),
    }
    return out


def ratios(by_mode: dict[str, dict[str, Any]], mode: str, base: str = "nowarm") -> dict[str, Any]:
    """`mode` against `base`: mean TTFT and wait after tool calls, all and by guess; mean session time."""
    if mode not in by_mode or base not in by_mode:
        return {}
    a, b = by_mode[mode], by_mode[base]
    return {"ttft": _ratio(a["ttft"]["mean"], b["ttft"]["mean"]),
            "ttft_p50": _ratio(a["ttft"]["p50"], b["ttft"]["p50"]),
            "wait": _ratio(a["wait"]["mean"], b["wait"]["mean"]),
            "seconds": _ratio(a["seconds"]["mean"], b["seconds"]["mean"]),
            **{f"ttft_{g}": _ratio(a["by_guess"][g]["ttft"]["mean"], b["by_guess"][g]["ttft"]["mean"])
               for g in GUESSES},
            **{f"wait_{g}": _ratio(a["by_guess"][g]["wait"]["mean"], b["by_guess"][g]["wait"]["mean"])
               for g in GUESSES}}


def guess_check(runs: list[dict[str, Any]]) -> dict[str, int]:
    """In warming runs, the derived guesses against what spec_obs_settle said (they must agree)."""
    rows = [row for run in runs if run["mode"] != "nowarm" for row in run["after_tool"]]
    derived = [row for row in rows if row["guess"] != "none"]
    agree = sum((row["guess"] == "matched") == row["settled"] for row in derived)
    return {"guesses": len(derived), "agree": agree, "settles": sum(row["settled"] is not None for row in rows)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per session and overall, per mode; the ratios to `nowarm` (pure arithmetic; tests cover it)."""
    modes = [m for m in MODES if any(r["mode"] == m for r in runs)]
    names = list(dict.fromkeys(r["session"] for r in runs))
    sessions = {}
    for name in names:
        by_mode = {m: mode_summary([r for r in runs if r["session"] == name and r["mode"] == m]) for m in modes}
        sessions[name] = {**by_mode, "ratios": {m: ratios(by_mode, m) for m in modes if m != "nowarm"}}
    total = {m: mode_summary([r for r in runs if r["mode"] == m]) for m in modes}
    all_ratios = {m: ratios(total, m) for m in modes if m != "nowarm"}
    reference = {(r["session"], r["rep"]): r["trace"] for r in runs if r["mode"] == "nowarm"}
    tokens = {(r["session"], r["rep"]): r["output_tokens"] for r in runs if r["mode"] == "nowarm"}
    checked = [r for r in runs if r["mode"] != "nowarm" and (r["session"], r["rep"]) in reference]
    return {
        "ttft_after_tool_ratio": all_ratios.get("warm", {}).get("ttft"),
        "ttft_after_matched_ratio": all_ratios.get("warm", {}).get("ttft_matched"),
        "wait_after_tool_ratio_provisional": all_ratios.get("provisional", {}).get("wait"),
        "total": {**total, "ratios": all_ratios}, "sessions": sessions, "guess_check": guess_check(runs),
        "trajectories_equal": sum(r["trace"] == reference[(r["session"], r["rep"])] for r in checked),
        "trajectories_checked": len(checked),
        "output_tokens_equal": sum(r["output_tokens"] == tokens[(r["session"], r["rep"])] for r in checked),
        "not_finished": [f"{r['session']}/{r['mode']}/{r['rep']}: {r['status']}"
                         for r in runs if r["status"] != Status.FINISHED],
    }


# -- running ----------------------------------------------------------------------------------------

def checkout(session: recorded.LiveSession, cache: Path) -> Path:
    """A fresh copy of the session's template at a fixed path of its own (apart from the replay benchmark's)."""
    target = cache / "run-embedded" / session.name / session.dirname
    shutil.rmtree(target.parent, ignore_errors=True)
    target.parent.mkdir(parents=True)
    shutil.copytree(recorded.template(session, cache), target, symlinks=True)
    return target


def new_session(session: recorded.LiveSession, engine: Engine, repo: Path, mode: str, model: Path | None,
                budget: Budget, events: list[Event], nonce: int) -> tuple[Session, Workspace]:
    """A Session replaying `session` through the real engine in `mode`, its task message under `nonce`."""
    workspace = Workspace(repo)
    config = SessionConfig(max_steps=len(session.recording.turns) + 1, max_seconds=1800.0)
    options = SessionOptions(config=config, budget=budget, warm=mode != "nowarm", provisional=mode == "provisional")
    loop = open_session(options, session.recording.task or "", ForcedReplayEngine(engine, session.recording), workspace,
                        [events.append], analyzer=analyzer_for("on", session, model))
    loop.messages[1]["content"] = nonce_task(loop.messages[1]["content"], nonce)  # the model's view only
    return loop, workspace


async def prime(engine: Engine, session: recorded.LiveSession, cache: Path) -> None:
    """Pre-fill the session's system prompt (the same in all its runs) once, before anything is timed."""
    repo = await asyncio.to_thread(checkout, session, cache)
    loop, workspace = new_session(session, engine, repo, "nowarm", None, Budget(), [], 0)
    workspace.close()
    request = LLMRequest(f"prime-{session.name}", loop.messages[:1] + [{"role": "user", "content": "-"}], [], 1)
    async for _ in engine.stream(request):
        pass


async def run_one(engine: Engine, session: recorded.LiveSession, mode: str, rep: int, model: Path | None,
                  budget: Budget, cache: Path, nonce: int) -> dict[str, Any]:
    """One replay of one session in one mode, from a fresh copy of its repository."""
    repo = await asyncio.to_thread(checkout, session, cache)
    events: list[Event] = []
    loop, workspace = new_session(session, engine, repo, mode, model, budget, events, nonce)
    end, seconds = await timed_run(loop, workspace)
    return run_record(events, session.name, mode, rep, seconds, end.status, end.steps)


def engine_info(engine: Any) -> dict[str, Any]:
    """The engine's name, start time and the scheduler settings that decide how a warm prefill competes."""
    info: dict[str, Any] = {"name": engine.name, "start_s": round(getattr(engine, "started_seconds", 0.0), 1)}
    config = getattr(getattr(engine, "_llm", None), "vllm_config", None)
    if config is not None:
        info.update(block_size=config.cache_config.block_size,
                    max_num_batched_tokens=config.scheduler_config.max_num_batched_tokens,
                    chunked_prefill=config.scheduler_config.enable_chunked_prefill,
                    policy=str(config.scheduler_config.policy))
    return info


async def run_all(selected: list[recorded.LiveSession], modes: list[str], repeat: int, model: Path | None,
                  budget: Budget, cache: Path, progress: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Start the engine, prime each session's system prompt, then every session in every mode, interleaved."""
    from harness.engine.factory import EngineOptions, start_local

    for session in selected:  # build or fetch every repository before the engine starts
        await asyncio.to_thread(recorded.template, session, cache)
    engine = await start_local(EngineOptions(attach=False, drafts="off"))  # it forces the recorded answers
    info = engine_info(engine)
    nonces = random.Random().sample(range(10**7, 10**8), repeat * len(selected) * len(modes))
    runs: list[dict[str, Any]] = []
    try:
        for session in selected:
            await prime(engine, session, cache)
        for rep in range(repeat):
            for index, session in enumerate(selected):
                for mode in order(modes, rep, index):
                    load = os.getloadavg()[0]
                    run = await run_one(engine, session, mode, rep, model, budget, cache, nonces[len(runs)])
                    run["load"] = round(load, 2)
                    runs.append(run)
                    if progress:
                        ttft = [row["ttft"] for row in run["after_tool"] if row["ttft"] is not None]
                        print(f"  rep {rep + 1}/{repeat} {session.name:24} {mode:11} {run['seconds']:7.1f} s "
                              f"{run['status']}, ttft after tools {sum(ttft):6.1f} s, warmed {run['warms']} "
                              f"(matched {run['matched']}), promoted {run['promoted']}, cache "
                              f"{run['cached_tokens']}/{run['prompt_tokens']}, load {load:.1f}",
                              file=sys.stderr, flush=True)
    finally:
        await engine.close()
    return runs, info


def run(session_dir: Path = recorded.SESSIONS_DIR, only: list[str] | None = None, repeat: int = 1,
        provisional: bool = False, model: Path | None = None, max_sandboxed: int | None = None,
        cache: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """The whole benchmark on the embedded engine; call it under `if __name__ == "__main__"` (vLLM spawns)."""
    if repeat < 1 or (max_sandboxed is not None and max_sandboxed < 0):
        raise UsageError("--repeat must be at least 1 and --max-sandboxed at least 0")
    selected = recorded.load_sessions(session_dir, only)
    model_path, model_note = model_choice(model)
    budget = Budget() if max_sandboxed is None else Budget(max_sandboxed=max_sandboxed)
    modes = list(MODES if provisional else MODES[:2])
    cache = cache or recorded.cache_dir()
    bench_environment()
    before = machine()
    started = time.perf_counter()
    runs, engine = asyncio.run(run_all(selected, modes, repeat, model_path, budget, cache, progress))
    (cache / "last-runs-embedded.json").write_text(json.dumps(runs), encoding="utf-8")
    result = summarize(runs)
    load_before = before.pop("load")
    result["config"] = {"modes": modes, "repeat": repeat, "model": model_note,
                        "max_sandboxed": budget.max_sandboxed, "sessions": [recorded.describe(s) for s in selected],
                        "engine": engine, "seconds": round(time.perf_counter() - started, 1)}
    result["machine"] = {**before, "load_before": load_before, "load_after": machine()["load"]}
    result["runs"] = runs
    return result


# -- the table --------------------------------------------------------------------------------------

def _s(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row(label: str, mode: str, m: dict[str, Any]) -> list[str]:
    g = m["by_guess"]
    return [label, mode, str(m["runs"]), _s(m["seconds"]["mean"], 1), str(m["ttft"]["n"]), _s(m["ttft"]["mean"]),
            _s(m["ttft"]["p50"]), _s(m["wait"]["mean"]), _s(g["matched"]["ttft"]["mean"]),
            _s(g["mismatched"]["ttft"]["mean"]), _s(g["none"]["ttft"]["mean"]), f"{m['cache_hit_after_tool']:.0%}",
            f"{m['cache_hit']:.0%}", str(m["warms"]), str(m["matched"])]


def report(result: dict[str, Any]) -> Report:
    """Each session and mode, then the mix (seconds; TTFT of the steps that follow a tool call), then the ratios."""
    config, total = result["config"], result["total"]
    title = (f"tao bench live --engine embedded: {len(config['sessions'])} sessions x {config['repeat']} "
             f"repetitions, modes {', '.join(config['modes'])}; speculation on (model: {config['model']}; "
             f"max_sandboxed {config['max_sandboxed']})")
    rows = [_row(name, mode, row[mode]) for name, row in result["sessions"].items() for mode in config["modes"]]
    rows += [_row("all", mode, total[mode]) for mode in config["modes"]]
    table = Table(["session", "mode", "runs", "sess s", "n", "ttft", "p50", "wait", "matched", "mismat", "none",
                   "hit@t", "hit", "warms", "match"], rows, title=title, left=2)
    notes: list[str] = []
    for mode, r in total["ratios"].items():
        notes.append(f"{mode}/nowarm: ttft after a tool {_s(r['ttft'], 3)} (p50 {_s(r['ttft_p50'], 3)}; after a "
                     f"matched guess {_s(r['ttft_matched'], 3)}, mismatched {_s(r['ttft_mismatched'], 3)}, no guess "
                     f"{_s(r['ttft_none'], 3)}); wait {_s(r['wait'], 3)} (matched {_s(r['wait_matched'], 3)}); "
                     f"session time {_s(r['seconds'], 3)}")
    check = result["guess_check"]
    notes.append(f"guesses (warming runs): {check['guesses']} derived, {check['agree']} agree with spec_obs_settle "
                 f"({check['settles']} settles); trajectories equal to nowarm's: {result['trajectories_equal']}/"
                 f"{result['trajectories_checked']} (output token counts: {result['output_tokens_equal']})"
                 + (f"; not finished: {', '.join(result['not_finished'])}"
                                                         if result["not_finished"] else ""))
    m = result["machine"]
    notes.append(f"machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}, load {m['load_before']} -> "
                 f"{m['load_after']}; engine start {config['engine']['start_s']:.0f} s, "
                 f"{config['seconds']:.0f} s in all")
    return Report(result, [table], notes)
