"""`tao bench cosched`: many recorded sessions against one engine, with and without the co-scheduler.

    tao bench cosched --sessions 1,4,16 --engine embedded                  # the real vLLM CPU engine
    tao bench cosched --sessions 1,8,32,64,128,192 --engine sim            # simulated, GPU-class profile

At each level N, N sessions start together (examples/sessions round robin, each task tagged so that
only the system prompt is shared) in each mode (harness.bench.cosched_run): `fcfs` (plain vLLM), the
rivals `cap` (swept over --caps, the best reported), `las` and `ttl` (harness.cosched_policies), `tao`
(the co-scheduler's Pacing) and `tao+spec` (with speculation); `spec` (speculation, no pacing) on request.
Reported per level and mode: mean and p99 session time, engine time per step, time waiting for
admission, cached prompt share; and Tao's ratios to the best rival and to fcfs, which the targets are about.
`--engine sim` runs harness.engine.sim on a virtual clock (harness.bench.vclock), `--profile gpu` (default), `cpu`,
`cpu-bf16` or a calibration JSON (`tao bench calibrate`); the co-scheduler paces by the same profile (for
the embedded engine: this CPU's built-in profile unless `--profile` says otherwise, with the engine's own
KV cache size). `--repeat` runs every level again, the modes' order rotating. JSON with `--json`, and a
table; `--partial` keeps the levels done so far in a file, for long real-engine runs. `--fit` cuts every session
to the engine's context window (harness.bench.cosched_fit), the same cut for sim and embedded; `--kv-tokens`
sizes the KV cache (the embedded engine's, or the simulated profile's) so that about K contexts fit.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import sys
import time
from dataclasses import asdict, replace
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.bench import cosched_run as runner
from harness.bench.cosched_fit import first_steps, fit as fit_workload
from harness.bench import run_module
from harness.bench.calibrate import kv_tokens
from harness.bench.live_parts import model_choice, quantile
from harness.bench.report import Report, Table, cell
from harness.bench.sim_tokens import embedded_chat_tokens
from harness.bench.vclock import VirtualClockLoop
from harness.coscheduler import Pacing
from harness.engine.sim import PROFILES, Profile, SimEngine, Tokenizer
from harness.errors import UsageError
from harness.machine import machine
from harness.vocabulary import Status



def cache_dir() -> Path:
    """Books and the shared workspace path: next to `tao bench live`'s cache."""
    from harness.bench.recordings import cache_dir as live_cache

    return live_cache().parent / "cosched"


def local_profile() -> str:
    """The built-in profile of this machine's CPU engine: bf16 where the CPU computes it natively, else float32."""
    from harness.engine.vllm_local import cpu_has_bf16

    return "cpu-bf16" if cpu_has_bf16() else "cpu"


def profile_for(name: str) -> Profile:
    """A built-in profile (gpu, cpu) or a calibration JSON."""
    if name in PROFILES:
        return PROFILES[name]
    path = Path(name)
    if not path.is_file():
        raise UsageError(f"--profile {name}: not one of {', '.join(PROFILES)} and not a file")
    return Profile.load(path)


async def run_levels(levels: list[int], engine_kind: str, profile: Profile, workload: runner.Workload,
                     most_groups: int, progress: bool, partial: Path | None = None,
                     wanted: tuple[str, ...] = runner.DEFAULT_MODES, repeat: int = 1,
                     caps: tuple[int, ...] = runner.CAPS, kv_tokens_asked: int | None = None,
                     tokenizer: Tokenizer | None = None) -> tuple[list[dict[str, Any]], Pacing]:
    """Every level in every mode (`cap` once per limit of `caps`), `repeat` times, and the pacing used. The
    runs of a level go back to back, their order rotating by level and by repetition, so that drifts in the
    machine's load hit every mode. The real engine is paced by the profile's step times and its own KV cache
    size, which differs from machine to machine (dtype, VLLM_CPU_KVCACHE_SPACE, --kv-tokens)."""
    root = cache_dir() / "workspace" / "repo"
    root.mkdir(parents=True, exist_ok=True)
    shared = await _embedded(kv_tokens_asked) if engine_kind == "embedded" else None
    if shared is not None:
        profile = replace(profile, kv_tokens=kv_tokens(shared))
    if progress:
        print(f"  {context_line(profile, workload)}", file=sys.stderr, flush=True)
    pacing = runner.pacing_for(profile, workload)
    reload = runner.reload_per_token(profile, workload)
    names = runner.variants(wanted, caps)
    out: list[dict[str, Any]] = []
    try:
        for index, level in enumerate(levels):
            row: dict[str, Any] = {"sessions": level, "modes": {}, "order": []}
            runs: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in names}  # per repetition
            stats: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            cpu: dict[str, float] = {name: 0.0 for name in names}  # this process's CPU seconds, per run
            for rep in range(repeat):
                shift = (index + rep) % len(names)
                order = names[shift:] + names[:shift]
                row["order"].append(order)
                for name in order:
                    mode = "cap" if name.startswith("cap-") else name
                    policy = runner.policy_for(name, pacing, reload)
                    groups = []
                    cpu_before = time.process_time()
                    for g, members in enumerate(runner.groups(level, workload, most_groups)):
                        engine = shared or SimEngine(profile, tokenizer)
                        if shared is not None:
                            await runner.warm_system_prompt(shared, workload, root)
                        tag = f"{name}-{level}-{rep}-{g}-{time.time_ns() % 10**8}"
                        groups.append(await runner.run_group(engine, workload, members, mode, policy, tag, root))
                        if isinstance(engine, SimEngine):
                            stats[name].append(asdict(engine.stats))
                            await engine.close()
                    runs[name].append(groups)
                    cpu[name] += time.process_time() - cpu_before
                    summary = mode_summary([g for done in runs[name] for g in done], stats[name])
                    # Tao's process: session loops, analyzer, co-scheduler, and vLLM's front end or the simulator;
                    # never the engine core, which runs in a process of its own.
                    summary["process_cpu_s"] = round(cpu[name], 2)
                    summary["repetition_means"] = [mode_summary(done, [])["mean"] for done in runs[name]]
                    row["modes"][name] = summary
                    pick_best_cap(row["modes"])
                    if partial is not None:  # a long run keeps what it measured should it be stopped
                        partial.write_text(json.dumps({"levels": [*out, row]}, indent=1) + "\n", encoding="utf-8")
                    if progress:
                        last = summary["repetition_means"][-1]
                        print(f"  {level:4} sessions  {name:8} repetition {rep + 1}/{repeat}: mean {last:9.2f} s; "
                              f"so far mean {summary['mean']:9.2f} s  p99 {summary['p99']:9.2f} s  "
                              f"({summary['runs']} session runs; {summary['process_cpu_s']:.1f} CPU-s in this process)",
                              file=sys.stderr, flush=True)
            out.append(row)
    finally:
        if shared is not None:
            await shared.close()
    return out, pacing


def pick_best_cap(modes: dict[str, Any]) -> None:
    """Report the swept cap with the lowest mean as mode `cap`, its limit beside it (as one tuned by hand)."""
    swept = {name: summary for name, summary in modes.items() if name.startswith("cap-")}
    if swept:
        best = min(swept, key=lambda name: swept[name]["mean"])
        modes["cap"] = {**swept[best], "limit": int(best.removeprefix("cap-"))}


async def _embedded(kv_tokens_asked: int | None = None) -> Any:
    """The embedded engine, started in this process, its KV cache held to `kv_tokens_asked` when given."""
    from harness.engine.factory import EngineOptions, start_local

    return await start_local(EngineOptions(attach=False, kv_tokens=kv_tokens_asked, drafts="off"))  # it forces answers


def kv_contexts(profile: Profile, workload: runner.Workload) -> dict[str, int]:
    """The workload's mean and largest context in tokens, and K: how many mean contexts the KV cache holds."""
    mean, largest = workload.context_tokens(profile)
    return {"mean": mean, "max": largest, "kv_tokens": profile.kv_tokens, "k": profile.kv_tokens // max(1, mean)}


def context_line(profile: Profile, workload: runner.Workload) -> str:
    """The run's first line: the workload's context sizes and how many contexts the KV cache holds."""
    k = kv_contexts(profile, workload)
    return (f"workload: {len(workload.sessions)} sessions, context mean {k['mean']:,} / max {k['max']:,} tokens; "
            f"the KV cache ({k['kv_tokens']:,} tokens) holds K = {k['k']} mean contexts")


def embedded_tokens() -> Callable[[str], int]:
    """Tokens of a text under the embedded model's tokenizer: the real CPU engine's count, which --fit holds to
    its window as well as the profile's characters a token."""
    from transformers import AutoTokenizer

    from harness.engine.embedded_model import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(None))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def check_kv_tokens(asked: int, profile: Profile, engine_kind: str) -> None:
    """UsageError unless `asked` tokens hold one whole context and, on the embedded engine, are no more than the
    profile's cache (the simulator takes any size: a cache that never evicts bounds what a schedule can save)."""
    if asked < profile.max_model_len:
        raise UsageError(f"--kv-tokens {asked}: the KV cache must hold at least one whole context, the engine's "
                         f"window of {profile.max_model_len} tokens; give {profile.max_model_len} or more")
    if engine_kind == "embedded" and asked > profile.kv_tokens:
        raise UsageError(f"--kv-tokens {asked}: more than the {profile.kv_tokens:,} tokens of profile {profile.name}'s "
                         "cache; on the embedded engine --kv-tokens only makes the cache smaller (a larger one: "
                         "set VLLM_CPU_KVCACHE_SPACE in GiB)")


def mode_summary(groups: list[dict[str, Any]], engine_stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and p99 session time and what went into it, over every session of every group."""
    sessions = [s for g in groups for s in g["sessions"]]
    times = [s["seconds"] for s in sessions]
    steps = sum(s["steps"] for s in sessions) or 1
    prompt = sum(s["prompt_tokens"] for s in sessions) or 1
    actions: dict[str, int] = {}
    for group in groups:
        for key, count in group["cosched"].items():
            actions[key] = actions.get(key, 0) + count
    summary = {
        "mean": round(statistics.fmean(times), 3), "p99": round(quantile(times, 0.99), 3), "runs": len(times),
        "engine_s_per_step": round(sum(s["engine_seconds"] for s in sessions) / steps, 4),
        "queue_s_per_step": round(sum(s["queue_wait"] for s in sessions) / steps, 4),
        "cached_share": round(sum(s["cached_tokens"] for s in sessions) / prompt, 4),
        "promoted": round(statistics.fmean(s["promoted"] for s in sessions), 2),
        "warm": {"settled": sum(s["warm_settled"] for s in sessions),
                 "matched": sum(s["warm_matched"] for s in sessions)},
        "cosched": actions,
        "not_finished": sum(s["status"] != Status.FINISHED for s in sessions),
    }
    if engine_stats:
        summary["engine"] = {key: round(sum(e[key] for e in engine_stats), 3) for key in engine_stats[0]}
    return summary


def _ratio(modes: dict[str, Any], a: str, b: str, q: str) -> float | None:
    """Mode a's statistic q over mode b's, to 4 places; None when either mode is missing or b's is zero."""
    return round(modes[a][q] / modes[b][q], 4) if a in modes and b in modes and modes[b][q] else None


def best_rival(modes: dict[str, Any], q: str) -> str | None:
    """The rival (best cap, las, ttl) with the lowest statistic q at a level; None when none ran."""
    present = [name for name in runner.RIVALS if name in modes]
    return min(present, key=lambda name: modes[name][q]) if present else None


def ratios(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: tao and tao+spec against the best rival (by mean for the mean, by p99 for the p99) and
    against fcfs, and the best rivals' names."""
    out = []
    for row in levels:
        modes = row["modes"]
        r = functools.partial(_ratio, modes)
        best_mean, best_p99 = best_rival(modes, "mean"), best_rival(modes, "p99")
        entry: dict[str, Any] = {"sessions": row["sessions"], "best_mean": _label(modes, best_mean),
                                 "best_p99": _label(modes, best_p99)}
        for tao, key in (("tao", "tao"), ("tao+spec", "taospec")):
            entry[f"{key}_best_mean"] = r(tao, best_mean, "mean") if best_mean else None
            entry[f"{key}_best_p99"] = r(tao, best_p99, "p99") if best_p99 else None
            entry[f"{key}_fcfs_mean"], entry[f"{key}_fcfs_p99"] = r(tao, "fcfs", "mean"), r(tao, "fcfs", "p99")
        out.append(entry)
    return out


def _label(modes: dict[str, Any], name: str | None) -> str | None:
    """A rival's name as reported: the best cap with its limit."""
    return f"cap-{modes['cap']['limit']}" if name == "cap" else name


def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets for Tao (pacing with speculation) from 64 sessions, level by level: met, missed, or
    not measured (no level in range)."""
    def check(name: str, key: str, bound: float, least: int = 64) -> dict[str, Any]:
        hits = {r["sessions"]: r[key] for r in rows if r["sessions"] >= least and r[key] is not None}
        return {"target": name, "levels": hits, "met": all(v <= bound for v in hits.values()) if hits else None}
    return {"mean_le_0.85_best_from_64": check("mean <= 0.85 x the best of cap, las, ttl at >= 64",
                                               "taospec_best_mean", 0.85),
            "p99_le_0.9_best_from_64": check("p99 <= 0.9 x the best of cap, las, ttl at >= 64",
                                             "taospec_best_p99", 0.9),
            "mean_le_0.5_fcfs_from_64": check("mean <= 0.5 x fcfs at >= 64", "taospec_fcfs_mean", 0.5)}


def run(levels: list[int], engine_kind: str, profile_name: str | None, only: list[str] | None, model: Path | None,
        most_groups: int | None, progress: bool = True, partial: Path | None = None,
        modes: tuple[str, ...] = runner.DEFAULT_MODES, traces: Path | None = None,
        holdout: float | None = None, repeat: int = 1, caps: tuple[int, ...] = runner.CAPS, fit: bool = False,
        kv_tokens_asked: int | None = None, steps: int | None = None, tokens: str = "chars") -> dict[str, Any]:
    """The whole benchmark: load the workload (cut to the engine's window with `fit`, to its first `steps` turns),
    run every level in every mode, summarize. `kv_tokens_asked` sizes the KV cache: the embedded engine's, or the
    simulated profile's. `tokens` is how the simulator counts tokens: `chars` (the profile's characters a token)
    or `embedded` (the embedded model's tokenizer, as the real CPU engine counts them)."""
    if engine_kind not in ("sim", "embedded"):
        raise UsageError(f"--engine must be sim or embedded, not {engine_kind!r}")
    if not levels or min(levels) < 1:
        raise UsageError("--sessions takes a comma-separated list of positive counts, e.g. 1,8,32")
    if holdout is not None and not 0 < holdout < 1:
        raise UsageError(f"--holdout {holdout}: give the held-out share as a fraction between 0 and 1, e.g. 0.3")
    if holdout is not None and traces is None:
        raise UsageError("--holdout splits --traces; give --traces DIR too")
    if tokens not in ("chars", "embedded"):
        raise UsageError(f"--tokens {tokens!r}: choose chars or embedded")
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: give a positive number of repetitions")
    if not caps or min(caps) < 1:
        raise UsageError("--caps takes a comma-separated list of positive session limits, e.g. 16,24,32")
    if most_groups is not None and most_groups < 1:
        raise UsageError(f"--groups {most_groups}: give a positive number of runs per level")
    profile = profile_for(profile_name or (local_profile() if engine_kind == "embedded" else "gpu"))
    if kv_tokens_asked is not None:
        check_kv_tokens(kv_tokens_asked, profile, engine_kind)
        profile = replace(profile, kv_tokens=kv_tokens_asked)  # the simulator's; the real engine reports its own
    model_path, model_note = model_choice(model)
    most = most_groups if most_groups is not None else (1 if engine_kind == "embedded" else 8)
    started = time.perf_counter()
    before = machine()

    # On the real clock: a session's book is recorded by running the real tools, whose timeouts a virtual
    # clock would fire at once (every subprocess wait jumps the clock ahead).
    workload = asyncio.run(runner.load_workload(only, model_path, cache_dir(), traces, holdout))
    fitted = fit_workload(workload, profile, embedded_tokens()) if fit else None
    if fitted is not None:
        workload = fitted.workload
        if progress:
            print(f"  {fitted.summary()}", file=sys.stderr, flush=True)
    if steps is not None:
        workload = first_steps(workload, steps)
    if long := workload.too_long(profile):
        raise UsageError(f"{len(long)} of {len(workload.sessions)} sessions outgrow the engine's context window "
                         f"({profile.max_model_len} tokens, profile {profile.name}), e.g. {long[0]}; cut them "
                         "to the window with --fit, pick sessions with --only, or an engine with a longer window "
                         "(--profile gpu)")
    factory = VirtualClockLoop if engine_kind == "sim" else None
    tokenizer = embedded_chat_tokens() if engine_kind == "sim" and tokens == "embedded" else None
    with asyncio.Runner(loop_factory=factory) as loop:
        rows, pacing = loop.run(run_levels(levels, engine_kind, profile, workload, most, progress, partial, modes,
                                           repeat, caps, kv_tokens_asked, tokenizer))
    result_ratios = ratios(rows)
    return {"config": {"engine": engine_kind, "profile": profile.name, "levels": levels, "groups_at_most": most,
                       "repeat": repeat, "modes": list(modes), "caps": list(caps),
                       "model": model_note, "pacing": asdict(pacing), "sessions": [s.name for s in workload.sessions],
                       "workload": str(traces) if traces is not None else "examples/sessions", "holdout": holdout,
                       "fit": fit, "steps": steps, "tokens": tokens if engine_kind == "sim" else "engine",
                       **({"fit_steps": fitted.to_dict()} if fitted is not None else {}),
                       "context_tokens": kv_contexts(replace(profile, kv_tokens=pacing.kv_tokens), workload),
                       "wall_seconds": round(time.perf_counter() - started, 1)},
            "levels": rows, "ratios": result_ratios, "targets": targets(result_ratios),
            "machine": {**before, "load_after": machine()["load"]}}


def report(result: dict[str, Any]) -> Report:
    """Each level and mode, then Tao's ratios to the best rival and to fcfs, then the targets and the machine."""
    config = result["config"]
    title = (f"tao bench cosched: engine {config['engine']} ({config['profile']}), pacing knee "
             f"{config['pacing']['knee']}, KV cache {config['pacing']['kv_tokens']:,} tokens, max wait "
             f"{config['pacing']['max_wait']:.1f} s; model: {config['model']}")
    modes = Table(["N", "mode", "mean s", "p99 s", "eng s/step", "queue s/step", "cached", "promo", "warm ok/all"],
                  title=title, left=2, rows=[
        [str(row["sessions"]), _shown(name, m), f"{m['mean']:.2f}", f"{m['p99']:.2f}", f"{m['engine_s_per_step']:.3f}",
         f"{m['queue_s_per_step']:.3f}", f"{m['cached_share']:.1%}", f"{m['promoted']:.2f}",
         f"{m['warm']['matched']}/{m['warm']['settled']}"]
        for row in result["levels"] for name, m in _in_order(row["modes"])])
    keys = ("tao_best_mean", "tao_best_p99", "taospec_best_mean", "taospec_best_p99", "tao_fcfs_mean",
            "taospec_fcfs_mean", "taospec_fcfs_p99")
    ratios = Table(["N", "best rival (mean / p99)", "tao/best mean", "p99", "tao+spec/best mean", "p99",
                    "tao/fcfs mean", "tao+spec/fcfs mean", "p99"], left=2, rows=[
        [str(r["sessions"]), f"{r['best_mean'] or '-'} / {r['best_p99'] or '-'}",
         *(cell(r[key], ".3f") for key in keys)] for r in result["ratios"]])
    verdicts = {True: "met", False: "NOT met", None: "not measured"}
    notes = [f"target {key}: {verdicts[target['met']]}" for key, target in result["targets"].items()]
    m = result["machine"]
    notes.append(f"machine: {m['cores']} cores, {m['cpu']}, load {m['load']} -> {m['load_after']}; "
                 f"{config['wall_seconds']:.0f} s of wall time")
    return Report(result, [modes, ratios], notes)


def _in_order(modes: dict[str, Any]) -> list[tuple[str, Any]]:
    """A level's runs in MODES order, each swept cap before the best one."""
    return sorted(modes.items(), key=lambda item: (runner.MODES.index(item[0].split("-")[0]), item[0] == "cap",
                                                   len(item[0]), item[0]))


def _shown(name: str, summary: dict[str, Any]) -> str:
    """A run's label: the best cap says its limit."""
    return f"cap best ({summary['limit']})" if name == "cap" else name


HELP = """\
Run N recorded sessions (examples/sessions, round robin) at once against one engine, for each N of
--sessions, in these modes (--modes; all but spec by default):
  fcfs      no speculation, every request straight to the engine (plain vLLM)
  spec      Tao's speculation, no pacing
  cap       FCFS with at most C sessions in flight (a batch run's --workers C), once per C of --caps;
            the best C is reported as `cap`
  las       least attained service first: vLLM priority from each session's service so far (Autellix)
  ttl       a session's place and cached prefix held across its tool call for a TTL (Continuum)
  tao       requests paced by Tao's co-scheduler (harness.coscheduler.Pacing), no speculation
  tao+spec  Tao's speculation and pacing
The rivals (cap, las, ttl) and tao run without speculation. The model's answers are the recorded
ones, forced through the engine; tools answer with their recorded output after their recorded time.
Reports mean and p99 session time per N and mode, and Tao's ratios to the best rival and to fcfs."""

EXAMPLES = """\
examples:
  tao bench cosched --sessions 1,8,32,64,128,192 --engine sim            # simulated A100 (virtual clock)
  tao bench cosched --sessions 1,4,16 --engine embedded --json > r.json  # the real vLLM CPU engine
  T=../shared/traces/mini-swe-agent-gemini-3-pro-swebench-verified       # real SWE-bench trajectories:
  tao bench cosched --engine sim --traces $T --holdout 0.3
  tao bench cosched --engine embedded --traces $T --holdout 0.3 --fit --kv-tokens 17408   # cut to 8k, K = 4
  tao bench cosched --engine sim --tokens embedded --profile cal.json --traces $T --holdout 0.3 --fit \
      --kv-tokens 17408                        # its simulated twin, counting tokens as the real engine does
  tao bench cosched-plot sim.json r.json --out docs/cosched.png"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `tao bench cosched`."""
    parser.add_argument("--sessions", default="1,8,32,64,128,192",
                        help="comma-separated counts of concurrent sessions (default 1,8,32,64,128,192)")
    parser.add_argument("--engine", default="sim", choices=("sim", "embedded"),
                        help="sim (default) or embedded (real vLLM)")
    parser.add_argument("--profile", help="the engine profile: gpu, cpu, cpu-bf16, or a `tao bench calibrate --out` "
                                         "JSON; the simulator runs it, the co-scheduler paces by its step times and "
                                         "(sim only) its KV cache (default: gpu for sim; for embedded cpu-bf16 on a "
                                         "CPU with native bf16, else cpu)")
    parser.add_argument("--only", help="comma-separated recorded session names (default: all)")
    parser.add_argument("--traces", type=Path, help="drive the sessions from other agents' trajectories under this "
                                                    "directory (any `tao traces import` format) instead of "
                                                    "examples/sessions; tools take their modelled latency")
    parser.add_argument("--holdout", type=float, help="with --traces: only the held-out split of `tao bench predict` "
                                                      "(a stable hash of the instance id), e.g. 0.3")
    parser.add_argument("--model", type=Path, help="learned pattern model for the speculating modes")
    parser.add_argument("--groups", type=int, help="runs per level below the workload's size, to cover every "
                                                   "session (default: 8 for sim, 1 for embedded)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every level this many times, the modes' order rotating each time (default 1)")
    parser.add_argument("--modes", default=",".join(runner.DEFAULT_MODES),
                        help=f"comma-separated modes to run, of {','.join(runner.MODES)} "
                             f"(default {','.join(runner.DEFAULT_MODES)})")
    parser.add_argument("--caps", default=",".join(map(str, runner.CAPS)),
                        help="comma-separated limits on sessions in flight that mode cap sweeps "
                             f"(default {','.join(map(str, runner.CAPS))})")
    parser.add_argument("--fit", action="store_true",
                        help="cut each session before its first step that outgrows 95%% of the engine's context "
                             "window (by the profile's characters a token and by the embedded model's tokenizer), "
                             "its last kept turn a final answer; sessions keeping fewer than 3 steps are "
                             "left out (the same cut for sim and embedded, so they can be compared)")
    parser.add_argument("--kv-tokens", type=int, help="size the KV cache to this many tokens, at least the window "
                                                      "(8192 on the CPU engine); on the embedded engine at most its "
                                                      "own (vLLM's block count), on the simulator any size (one that "
                                                      "never evicts bounds what a schedule can save); "
                                                      "pick about K times the workload's mean context")
    parser.add_argument("--steps", type=int, help="cut every session to its first STEPS model turns (after --fit), "
                        "the last kept one its final answer: the real engine's long levels in hours, not a day")
    parser.add_argument("--tokens", choices=("chars", "embedded"), default="chars",
                        help="with --engine sim: count tokens by the profile's characters a token (default), or by "
                             "the embedded model's tokenizer as the real CPU engine does (its KV blocks then fall "
                             "where vLLM's do)")
    parser.add_argument("--partial", type=Path, help="write the levels measured so far to this JSON file after "
                                                     "every mode (for long real-engine runs)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout (table on stderr)")


def cmd_cosched(args: argparse.Namespace) -> int:
    """Run the benchmark and print it."""
    from harness.bench.calibrate import parse_counts

    levels = parse_counts(args.sessions, "--sessions")
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or set(modes) - set(runner.MODES):
        raise UsageError(f"--modes {args.modes!r}: choose from {', '.join(runner.MODES)}")
    caps = tuple(parse_counts(args.caps, "--caps"))
    result = run(levels, args.engine, args.profile, only, args.model, args.groups, partial=args.partial, modes=modes,
                 traces=args.traces, holdout=args.holdout, repeat=args.repeat, caps=caps, fit=args.fit,
                 kv_tokens_asked=args.kv_tokens, steps=args.steps, tokens=args.tokens)
    report(result).emit(args.json)
    return 0


def register(bench_subparsers: Any) -> None:
    """Add `cosched` to `tao bench`."""
    parser = bench_subparsers.add_parser(
        "cosched",
        formatter_class=argparse.RawDescriptionHelpFormatter, description=HELP, epilog=EXAMPLES)
    add_arguments(parser)
    parser.set_defaults(func=cmd_cosched)


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.bench.cosched ...` (the same options as `tao bench cosched`)."""
    return run_module("python -m harness.bench.cosched", add_arguments, cmd_cosched, argv)


if __name__ == "__main__":
    sys.exit(main())
