"""`tao swebench`: run an agent session on every instance of a SWE-bench-style dataset, optionally grade.

    tao swebench --instances lite.jsonl --repos ~/clones --workers 4 --output runs/lite [--evaluate] [--redo]
    tao swebench ... --ray [ADDRESS] --engine openai --base-url URL   (sessions on a Ray cluster's nodes)
    tao swebench ... --ray [ADDRESS] --engine-url URL1 --engine-url URL2   (and on several engine replicas)

Exit codes: 0 the batch went through (whatever each instance's outcome), 1 the engine or harness
failed, 2 bad usage, 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.coscheduler import Policy
from harness.engine.api import Engine
from harness.errors import UsageError
from harness.session import SessionConfig
from harness.swebench import eval_command, official
from harness.swebench.batch import Batch, BatchConfig, paced_by_gateway
from harness.swebench.cluster import LOCAL, ClusterBatch, check_engine
from harness.swebench.evaluate import DEFAULT_EVAL_TIMEOUT
from harness.swebench.instances import Instance, load_instances
from harness.swebench.progress import BatchProgress
from harness.swebench.scripted import ScriptedEngine
from tools import DEFAULT_TEST_TIMEOUT


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `swebench` subcommand."""
    from harness.flags import PACING_KNEE, PACING_KV_TOKENS, PACING_MAX_WAIT, POLICIES, add_engine_flags

    p = sub.add_parser("swebench", help="run and grade a SWE-bench-style batch on one shared engine",
                       description="Run the agent on every instance of a SWE-bench-style JSONL file, each in a "
                                   "git worktree of a local clone, all sessions on one co-scheduled engine. "
                                   "Writes preds.jsonl / preds.json in the official format.")
    p.add_argument("--instances", type=Path, required=True, help="instances file (.jsonl, SWE-bench's fields)")
    p.add_argument("--repos", type=Path, required=True,
                   help="folder of local clones: REPOS/owner/name, REPOS/owner__name or REPOS/name")
    p.add_argument("--output", type=Path, required=True, help="output folder (a rerun with it resumes)")
    p.add_argument("--workers", type=int, default=1, help="instances worked on at once (default 1)")
    p.add_argument("--evaluate", action="store_true",
                   help="grade each prediction without Docker (test_patch, FAIL_TO_PASS, PASS_TO_PASS) by the "
                        "official swebench package's rules (the eval extra)")
    p.add_argument("--redo", action="store_true", help="run every instance again, even finished ones")
    p.add_argument("--keep-worktrees", action="store_true",
                   help="keep each instance's worktree under OUTPUT/worktrees")
    p.add_argument("--model-name", default="tao", help="model_name_or_path in the predictions (default tao)")
    p.add_argument("--run-id", default="tao", help="names the run report MODEL.RUN_ID.json (default tao)")
    p.add_argument("--eval-timeout", type=float, default=DEFAULT_EVAL_TIMEOUT,
                   help=f"seconds the graded tests may run (default {DEFAULT_EVAL_TIMEOUT:g})")
    p.add_argument("--eval-command", help="test runner for grading, given the test ids (default: the test command "
                   "of the row's eval_script, as the official harness runs it; else python -m pytest -rA)")
    p.add_argument("--max-steps", type=int, default=30, help="model turns per instance (default 30)")
    p.add_argument("--max-time", type=float, default=1800.0, help="seconds per instance (default 1800)")
    p.add_argument("--max-tokens", type=int, default=1024, help="output tokens per model turn (default 1024)")
    p.add_argument("--test-command", help="the agent's run_tests command (default: detected per repository)")
    p.add_argument("--test-timeout", type=float, default=DEFAULT_TEST_TIMEOUT,
                   help=f"seconds an agent's test run may take (default {DEFAULT_TEST_TIMEOUT:g})")
    p.add_argument("--no-speculation", action="store_true", help="run tool calls only when the model asks")
    p.add_argument("--no-warm", action="store_true", help="no KV pre-warming on guessed observations")
    p.add_argument("--patterns", type=Path,
                   help="learned pattern model (default ~/.cache/tao/patterns.json if present)")
    p.add_argument("--cosched", choices=POLICIES, default="pacing",
                   help="co-scheduling policy: pacing (default) or fcfs (every request at once, plain vLLM)")
    p.add_argument("--knee", type=int, default=PACING_KNEE,
                   help=f"pacing: requests in flight the engine serves well (default {PACING_KNEE})")
    p.add_argument("--kv-tokens", type=int, default=PACING_KV_TOKENS, help="pacing: the engine's KV cache in tokens")
    p.add_argument("--max-wait", type=float, default=PACING_MAX_WAIT,
                   help="pacing: seconds after which a started session's request goes ahead of the others")
    p.add_argument("--sim", choices=("cpu", "gpu"),
                   help="with --replay DIR: force the scripted turns through a simulated vLLM engine (benchmarks)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON on stdout")
    p.add_argument("--ray", nargs="?", const=LOCAL, metavar="ADDRESS",
                   help="run the instances on a Ray cluster, --workers at a time (the ray extra): ADDRESS of its head, "
                        "auto for the one started on this machine by `ray start`, none to start a local one; every "
                        "node needs the clones at --repos and reaches the engine over HTTP (--engine openai, or "
                        "--engine-url per replica: the driver picks each instance's) or replays (--engine replay)")
    add_engine_flags(p)
    p.set_defaults(func=cmd_swebench)


async def open_batch_engine(args: argparse.Namespace, instances: list[Instance]) -> Engine:
    """The one engine every session shares; with --replay DIR, each instance's turns come from its script."""
    from harness.flags import engine_options
    from harness.engine.factory import open_engine

    tasks = {instance.task: instance.instance_id for instance in instances}
    if args.replay is not None and args.replay.is_dir():
        inner: Engine | None = None
        if args.sim:
            from harness.engine.sim import PROFILES, SimEngine

            inner = SimEngine(PROFILES[args.sim])
        elif args.engine != "replay":
            # not through a running tao serve: its API cannot force an answer (as for `tao run --replay FILE`),
            # and without drafts: vLLM takes no forcing logits processor beside them
            options = engine_options(argparse.Namespace(**{**vars(args), "replay": None}))
            inner = await open_engine(replace(options, attach=False, drafts="off"))
        return ScriptedEngine.from_dir(args.replay, tasks, inner, args.seconds_per_token)
    if args.engine == "replay":
        raise UsageError("--engine replay in `tao swebench` needs --replay DIR: a folder with one "
                         "<instance_id>.json turn script per instance")
    return await open_engine(engine_options(args))


def check_args(args: argparse.Namespace) -> Policy:
    """Refuse bad numbers among the flags before anything slow (loading instances, opening the engine: half a
    minute for vLLM); returns the co-scheduling policy the flags ask for."""
    from harness.flags import cosched_policy

    if args.workers < 1 or args.max_steps < 1 or args.max_time <= 0:
        raise UsageError("--workers and --max-steps must be at least 1 and --max-time positive")
    return cosched_policy(args.cosched, args.knee, args.kv_tokens, args.max_wait)


async def run_batch(args: argparse.Namespace) -> dict[str, Any]:
    """Check the flags, load, open the engine, run the batch, close the engine."""
    from harness.launch import session_patterns

    policy = check_args(args)
    if not args.repos.is_dir():
        raise UsageError(f"--repos {args.repos} is not a folder; give the folder that holds the local clones")
    instances = load_instances(args.instances)
    if args.evaluate:
        official.check(instances)  # before any session: the grading package is there and knows every instance
        eval_command.check(instances, args.eval_command)  # and each instance has a test command
    config = BatchConfig(
        output=args.output, repos=args.repos, workers=args.workers, redo=args.redo, evaluate=args.evaluate,
        session=SessionConfig(max_steps=args.max_steps, max_seconds=args.max_time, max_tokens=args.max_tokens),
        speculation=not args.no_speculation, warm=not args.no_warm,
        patterns=None if args.no_speculation else session_patterns(args.patterns, announce=True),
        test_command=args.test_command, test_timeout=args.test_timeout, eval_timeout=args.eval_timeout,
        eval_command=args.eval_command, model_name=args.model_name, run_id=args.run_id,
        keep_worktrees=args.keep_worktrees)
    if args.ray is not None:
        check_engine(args)
    engine = await open_batch_engine(args, instances)
    if paced_by_gateway(engine):
        print(f"tao swebench: paced by tao serve ({engine.name}); --cosched, --knee, --kv-tokens and --max-wait are "
              "the gateway's to set", file=sys.stderr)
    try:
        with BatchProgress(len(instances), 0, args.workers, sys.stderr) as progress:
            if args.ray is None:
                return await Batch(instances, engine, config, policy, progress).run()
            return await ClusterBatch(instances, engine, config, policy, progress, open_batch_engine, args,
                                      args.ray).run()
    finally:
        await engine.close()


def cmd_swebench(args: argparse.Namespace) -> int:
    try:
        summary = asyncio.run(run_batch(args))
    except KeyboardInterrupt:
        print(f"tao: interrupted; finished instances are saved in {args.output}, rerun the same command to resume",
              file=sys.stderr)
        return 130
    resolved = f", {summary['resolved']}/{summary['evaluated']} resolved" if summary["evaluated"] else ""
    status = ", ".join(f"{n} {s}" for s, n in sorted(summary["status"].items()))
    print(f"tao swebench: {summary['done']}/{summary['instances']} done ({status}){resolved} in "
          f"{summary['wall_seconds']:.1f} s; predictions in {args.output / 'preds.jsonl'}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary))
    return 0
