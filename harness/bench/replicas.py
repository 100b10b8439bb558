"""`tao bench replicas`: sessions over several simulated engine replicas, routed by session affinity against
round robin and random routing per request.

    tao bench replicas --replicas 1,2,4,8 --per-replica 14 --profile cpu-bf16      # the defaults; virtual clock

At each replica count R, R x --per-replica recorded sessions (examples/sessions round robin, each task tagged so
that only the system prompt is shared) start together against R simulated engines (harness.engine.sim), each
behind a co-scheduler of its own (a `tao serve` per replica, pacing by the profile). The modes:

- `affinity`: a session picks its replica once, when it starts, by Tao's rule (harness.engine.replicas.choose on
  the loads the replicas' co-schedulers report), and sends every request there;
- `round-robin`: every request goes to the next replica in turn (a per-request load balancer): a session's
  prefix is cached only where its earlier requests went;
- `random`: every request goes to a replica drawn at random (seeded).

Reported per R and mode: throughput (sessions an hour over the time until the last one ends), mean and p99
session time, and the share of prompt tokens found in the prefix cache; then affinity's throughput against
linear scaling from one replica, and its advantage over round robin.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import time
from collections.abc import Callable, AsyncGenerator
from dataclasses import asdict, dataclass
from typing import Any

from harness.bench import cosched_run as runner
from harness.bench import run_module
from harness.bench.cosched import cache_dir, profile_for
from harness.bench.live_parts import quantile
from harness.bench.report import Report, Table
from harness.bench.vclock import VirtualClockLoop
from harness.coscheduler import FCFS, CoScheduler, Policy
from harness.engine.api import Chunk, Engine, LLMRequest
from harness.engine.replicas import choose
from harness.engine.sim import Profile, SimEngine
from harness.errors import UsageError
from harness.machine import machine
from harness.vocabulary import Status

MODES = ("affinity", "round-robin", "random")
MODE = "tao"  # the sessions' mode in harness.bench.cosched_run: paced by the co-scheduler, no speculation
LINEAR_SHARE = 0.9  # the target: affinity's throughput at R replicas within 10% of R times one replica's


class Spread:
    """One session's engine that sends each request to the replica `pick` names (a per-request load balancer)."""

    def __init__(self, coscheds: list[CoScheduler], session_id: str, pick: Callable[[], int]) -> None:
        first = coscheds[0].engine
        self.coscheds, self.session_id, self.pick = coscheds, session_id, pick
        self.name, self.native_tools, self.prefix_cache = f"spread:{first.name}", first.native_tools, first.prefix_cache
        self.where: dict[str, int] = {}  # request id -> the replica it went to

    def stream(self, request: LLMRequest) -> AsyncGenerator[Chunk, None]:
        index = self.pick()
        self.where[request.request_id] = index
        return self.coscheds[index].stream(self.session_id, request)

    async def abort(self, request_id: str) -> None:
        index = self.where.get(request_id)
        if index is not None:
            await self.coscheds[index].abort(request_id)

    async def close(self) -> None:
        """The replicas outlive the session."""


@dataclass
class Router:
    """Gives each session its engine: pinned to one replica (affinity), or spread per request."""

    mode: str
    coscheds: list[CoScheduler]
    seed: int = 0

    def __post_init__(self) -> None:
        self.sent = [0] * len(self.coscheds)
        self.turn = 0
        self.counter = itertools.count()
        self.rng = random.Random(self.seed)

    def engine(self, session_id: str) -> Engine:
        """The engine one new session talks to."""
        count = len(self.coscheds)
        if self.mode == "affinity":
            loads = [cosched.occupancy() for cosched in self.coscheds]  # what each gateway's /v1/tao/load says
            index = choose(loads, self.sent, [True] * count, self.turn)
            self.sent[index] += 1
            self.turn = (index + 1) % count
            return self.coscheds[index].engine_for(session_id)
        if self.mode == "round-robin":
            return Spread(self.coscheds, session_id, lambda: next(self.counter) % count)
        return Spread(self.coscheds, session_id, lambda: self.rng.randrange(count))


async def run_level(replicas: int, sessions: int, mode: str, profile: Profile, workload: runner.Workload,
                    policy: Policy, seed: int) -> dict[str, Any]:
    """`sessions` sessions at once over `replicas` fresh simulated engines, each behind a co-scheduler with
    `policy`, routed by `mode`."""
    root = cache_dir() / "workspace" / "repo"
    root.mkdir(parents=True, exist_ok=True)
    engines = [SimEngine(profile) for _ in range(replicas)]
    coscheds = [CoScheduler(engine, policy) for engine in engines]
    try:
        for engine in engines:
            await runner.warm_system_prompt(engine, workload, root)
        router = Router(mode, coscheds, seed)
        tag = f"{mode}-{replicas}-{time.time_ns() % 10**8}"
        started = asyncio.get_running_loop().time()

        async def one(n: int) -> dict[str, Any]:
            session_id = f"{tag}-{n}"
            try:
                return await runner.run_session(router.engine(session_id), workload, n % len(workload.sessions),
                                                session_id, MODE, root, started)
            finally:
                for cosched in coscheds:
                    cosched.session_ended(session_id)

        runs = await asyncio.gather(*(one(n) for n in range(sessions)))
    finally:
        for engine in engines:
            await engine.close()
    return summarize(replicas, mode, runs, [asdict(engine.stats) for engine in engines])


def summarize(replicas: int, mode: str, runs: list[dict[str, Any]], stats: list[dict[str, Any]]) -> dict[str, Any]:
    """A level's numbers: throughput, mean and p99 session time, cache hit rate, what the engines computed."""
    times = [run["seconds"] for run in runs]
    makespan = max(times)
    prompt = sum(run["prompt_tokens"] for run in runs) or 1
    return {"replicas": replicas, "mode": mode, "sessions": len(runs),
            "throughput_per_hour": round(len(runs) / makespan * 3600, 1), "makespan": round(makespan, 3),
            "mean": round(statistics.fmean(times), 3), "p99": round(quantile(times, 0.99), 3),
            "cache_hit": round(sum(run["cached_tokens"] for run in runs) / prompt, 4),
            "prefill_tokens": sum(s["prefill_tokens"] for s in stats),
            "not_finished": sum(run["status"] != Status.FINISHED for run in runs)}


def scaling(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per replica count: affinity's throughput over linear (R x its throughput at the fewest replicas), and
    round robin's and random's mean, p99 and throughput against affinity's."""
    by = {(row["replicas"], row["mode"]): row for row in rows}
    counts = sorted({row["replicas"] for row in rows})
    base = by.get((counts[0], "affinity"))
    out = []
    for count in counts:
        mine = by.get((count, "affinity"))
        entry: dict[str, Any] = {"replicas": count}
        if mine is not None and base is not None:
            linear = base["throughput_per_hour"] * count / counts[0]
            entry["affinity_of_linear"] = round(mine["throughput_per_hour"] / linear, 4)
        for other in ("round-robin", "random"):
            theirs = by.get((count, other))
            if mine is not None and theirs is not None:
                entry[f"{other}_mean_ratio"] = round(theirs["mean"] / mine["mean"], 4)
                entry[f"{other}_p99_ratio"] = round(theirs["p99"] / mine["p99"], 4)
                entry[f"affinity_throughput_over_{other}"] = round(
                    mine["throughput_per_hour"] / theirs["throughput_per_hour"], 4)
        out.append(entry)
    return out


def run(counts: list[int], per_replica: int, profile_name: str, modes: tuple[str, ...], policy_name: str, seed: int,
        progress: bool = True) -> dict[str, Any]:
    """The whole study on the virtual clock: every replica count in every mode, each replica's co-scheduler
    pacing (`policy_name` pacing, by the profile) or admitting every request at once (fcfs: plain vLLM)."""
    profile = profile_for(profile_name)
    started, before = time.perf_counter(), machine()
    workload = asyncio.run(runner.load_workload(None, None, cache_dir()))
    if long := workload.too_long(profile):
        raise UsageError(f"{len(long)} sessions outgrow profile {profile.name}'s context window "
                         f"({profile.max_model_len} tokens), e.g. {long[0]}; pick --profile gpu")
    pacing = runner.pacing_for(profile, workload)
    policy: Policy = pacing if policy_name == "pacing" else FCFS()
    rows = []
    with asyncio.Runner(loop_factory=VirtualClockLoop) as loop:
        for count in counts:
            for mode in modes:
                row = loop.run(run_level(count, count * per_replica, mode, profile, workload, policy, seed))
                rows.append(row)
                if progress:
                    print(f"  {count} replicas  {mode:11}  {row['sessions']:4} sessions: "
                          f"{row['throughput_per_hour']:9.1f} sessions/h  mean {row['mean']:8.2f} s  "
                          f"p99 {row['p99']:8.2f} s  cache hit {row['cache_hit']:.1%}", file=sys.stderr, flush=True)
    ratios = scaling(rows)
    efficiencies = [r["affinity_of_linear"] for r in ratios if "affinity_of_linear" in r]
    return {"config": {"profile": profile.name, "replicas": counts, "per_replica": per_replica, "modes": list(modes),
                       "seed": seed, "policy": policy.name, "pacing": asdict(pacing),
                       "workload": [s.name for s in workload.sessions],
                       "wall_seconds": round(time.perf_counter() - started, 1)},
            "levels": rows, "scaling": ratios,
            "target": {"target": f"affinity within {1 - LINEAR_SHARE:.0%} of linear from {counts[0]} to {counts[-1]} "
                                 "replicas", "worst": min(efficiencies) if efficiencies else None,
                       "met": min(efficiencies) >= LINEAR_SHARE if efficiencies else None},
            "machine": {**before, "load_after": machine()["load"]}}


def report(result: dict[str, Any]) -> Report:
    """The levels, then affinity's scaling and its advantage, then the target and the machine."""
    config = result["config"]
    paced = f"pacing (knee {config['pacing']['knee']})" if config["policy"] == "pacing" else config["policy"]
    title = (f"tao bench replicas: profile {config['profile']}, {config['per_replica']} sessions per replica, "
             f"each replica's co-scheduler {paced}")
    levels = Table(["R", "mode", "sessions", "sessions/h", "mean s", "p99 s", "cache hit"], title=title, left=2,
                   rows=[[str(r["replicas"]), r["mode"], str(r["sessions"]), f"{r['throughput_per_hour']:.1f}",
                          f"{r['mean']:.2f}", f"{r['p99']:.2f}", f"{r['cache_hit']:.1%}"] for r in result["levels"]])

    def ratio(entry: dict[str, Any], key: str) -> str:
        return f"{entry[key]:.3f}" if key in entry else "-"

    scaled = Table(["R", "affinity / linear", "rr/aff mean", "rr/aff p99", "aff/rr thru", "random/aff mean",
                    "random/aff p99"], left=1, rows=[
        [str(e["replicas"]), ratio(e, "affinity_of_linear"), ratio(e, "round-robin_mean_ratio"),
         ratio(e, "round-robin_p99_ratio"), ratio(e, "affinity_throughput_over_round-robin"),
         ratio(e, "random_mean_ratio"), ratio(e, "random_p99_ratio")] for e in result["scaling"]])
    target = result["target"]
    verdict = {True: "met", False: "NOT met", None: "not measured"}[target["met"]]
    m = result["machine"]
    notes = [f"target ({target['target']}): {verdict}, worst {target['worst']}",
             f"machine: {m['cores']} cores, {m['cpu']}, load {m['load']} -> {m['load_after']}; "
             f"{config['wall_seconds']:.0f} s of wall time"]
    return Report(result, [levels, scaled], notes)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `tao bench replicas`."""
    parser.add_argument("--replicas", default="1,2,4,8", help="comma-separated replica counts (default 1,2,4,8)")
    parser.add_argument("--per-replica", type=int, default=14,
                        help="sessions per replica: R replicas run R times this many at once (default 14: a multiple "
                             "of the 7 bundled sessions, so that every replica gets the same mix)")
    parser.add_argument("--profile", default="cpu-bf16",
                        help="the simulated engine: cpu-bf16 (default: vLLM's CPU engine, measured), cpu, gpu "
                             "(an A100, derived), or a `tao bench calibrate` JSON")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {','.join(MODES)}")
    parser.add_argument("--policy", choices=("pacing", "fcfs"), default="pacing",
                        help="each replica's co-scheduler: pacing (default, as tao serve) or fcfs (plain vLLM)")
    parser.add_argument("--seed", type=int, default=0, help="the random mode's seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout (table on stderr)")


def cmd_replicas(args: argparse.Namespace) -> int:
    """Run the study and print it."""
    from harness.bench.calibrate import parse_counts

    counts = parse_counts(args.replicas, "--replicas")
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or set(modes) - set(MODES):
        raise UsageError(f"--modes {args.modes!r}: choose from {', '.join(MODES)}")
    if args.per_replica < 1:
        raise UsageError(f"--per-replica {args.per_replica}: give a positive number of sessions")
    report(run(counts, args.per_replica, args.profile, modes, args.policy, args.seed)).emit(args.json)
    return 0


def register(bench_subparsers: Any) -> None:
    """Add `replicas` to `tao bench`."""
    parser = bench_subparsers.add_parser("replicas", formatter_class=argparse.RawDescriptionHelpFormatter,
                                         description=__doc__)
    add_arguments(parser)
    parser.set_defaults(func=cmd_replicas)


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.bench.replicas ...` (the same options as `tao bench replicas`)."""
    return run_module("python -m harness.bench.replicas", add_arguments, cmd_replicas, argv)


if __name__ == "__main__":
    sys.exit(main())
