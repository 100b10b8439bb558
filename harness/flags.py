"""The session and engine flags that `tao run`, `tao demo`, `tao tui` and `tao swebench` share, and the engine
options they give; the co-scheduling defaults and policy that `tao serve` and `tao swebench` share. The limits'
defaults come from SessionConfig, their one home."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.approval import MODES
from harness.coscheduler import FCFS, Pacing, Policy
from harness.engine.factory import DRAFTS, ENGINES, EngineOptions
from harness.errors import UsageError
from harness.history import LAST
from harness.saved import PICK
from harness.session import SessionConfig
from harness.paths import state_dir

POLICIES = ("pacing", "fcfs")  # the co-scheduling policies `tao serve --policy` and `tao swebench --cosched` offer
PACING_KNEE = 4  # requests in flight the CPU engine serves well
PACING_KV_TOKENS = 46_000  # the CPU engine's KV cache in tokens, where neither a flag nor the engine says
PACING_MAX_WAIT = 120.0  # seconds after which a waiting session goes first


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    """The engine flags: which engine, which model, replay and decoding options."""
    group = parser.add_argument_group("engine")
    group.add_argument("--engine", choices=ENGINES, default=EngineOptions.kind,
                       help="vllm: in-process vLLM (default, embedded model); openai: a running "
                            "OpenAI-compatible server; replay: recorded turns")
    group.add_argument("--model", help="model name or directory for --engine vllm (default: embedded SmolLM2)")
    group.add_argument("--base-url", help="server URL for --engine openai, e.g. http://localhost:8000/v1")
    group.add_argument("--engine-url", action="append", metavar="URL|@FILE",
                       help="an OpenAI-compatible server (tao serve, vllm serve) to use as the engine; give it again "
                            "for several replicas of one model, or @FILE for a file of URLs (one a line, # comments). "
                            "Each session sticks to one replica, new ones go where there is most room "
                            "(implies --engine openai)")
    group.add_argument("--replay", type=Path,
                       help="trajectory .jsonl or JSON turn script for --engine replay; with --engine vllm, "
                            "its answers are forced token by token through the real engine")
    group.add_argument("--seconds-per-token", type=float, default=EngineOptions.seconds_per_token,
                       help="replay pacing: simulated seconds per output token "
                            f"(default {EngineOptions.seconds_per_token:g})")
    group.add_argument("--no-constrain", action="store_true",
                       help="do not constrain decoding to well-formed calls (for strong models)")
    group.add_argument("--max-model-len", type=int,
                       help="context length for --engine vllm (default: 8192 embedded, else the model's); "
                            "with --engine replay, a window the replayed prompts must fit")
    group.add_argument("--draft", choices=DRAFTS, default=EngineOptions.drafts,
                       help="token-level speculation in --engine vllm: ngram drafts tokens by prompt lookup and checks "
                            "them in one step (the model's own choices, fewer steps), off decodes a token a step "
                            f"(default {EngineOptions.drafts}; a forced --replay always runs with off)")


def add_session_flags(parser: argparse.ArgumentParser, quiet: bool = False) -> None:
    """The session flags: front end, approvals, output, limits, trajectory, speculation and resuming."""
    parser.add_argument("--headless", action="store_true",
                        help="no TUI: a human log on stderr (the default when not on a terminal)")
    approvals = parser.add_mutually_exclusive_group()
    approvals.add_argument("--mode", choices=list(MODES),
                           help="approvals for this run: read-only (nothing changes), ask (commands and edits ask; "
                                "the default), auto-edit (edits run, commands ask), full-auto (nothing asks); "
                                "default from ~/.config/tao/config.toml and .tao.toml")
    approvals.add_argument("--yolo", action="store_true", help="the same as --mode full-auto")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON event per line on stdout")
    if quiet:
        output.add_argument("-q", "--quiet", action="store_true",
                            help="for scripts: print only the final answer (the model's summary) on stdout, "
                                 "and no log; a session that does not finish says why on stderr (exit codes as usual)")
    parser.add_argument("--max-steps", type=int, default=SessionConfig.max_steps,
                        help=f"model turns before stopping (default {SessionConfig.max_steps}; demo 8)")
    parser.add_argument("--max-time", type=float, default=SessionConfig.max_seconds,
                        help=f"wall-clock limit in seconds (default {SessionConfig.max_seconds:g})")
    parser.add_argument("--max-tokens", type=int, default=SessionConfig.max_tokens,
                        help=f"output tokens per model turn (default {SessionConfig.max_tokens})")
    parser.add_argument("--trajectory", type=Path,
                        help=f"trajectory file to write (default {state_dir()}/trajectories/<time>.jsonl)")
    parser.add_argument("--test-command", help="the project's test command for run_tests (default: detected)")
    parser.add_argument("--no-speculation", action="store_true",
                        help="run every tool call only when the model asks (no speculation)")
    parser.add_argument("--no-warm", action="store_true",
                        help="do not pre-fill the next prompt on a guessed observation while a test runs")
    parser.add_argument("--provisional", action="store_true",
                        help="also start the next model step on the guessed observation (kept only if it "
                             "matches the real one byte for byte)")
    parser.add_argument("--patterns", type=Path,
                        help="learned pattern model for speculation (default ~/.cache/tao/patterns.json "
                             "if present; build one with `tao traces learn`); each session first adapts it "
                             "to your 20 newest past sessions in the state folder")
    try:
        parser.add_argument("--resume", nargs="?", const=PICK, metavar="TRAJECTORY",
                            help="continue a saved session to its end, in its own repository and trajectory file: "
                                 "the given file; without one, the TUI lists this repository's sessions to choose "
                                 "from (headless: the last one). The engine and limits come from this command's "
                                 "flags")
    except argparse.ArgumentError:
        pass  # `tao tui` defines its own --resume, with the same meaning
    parser.add_argument("--continue", dest="resume", action="store_const", const=LAST,
                        help="continue the last session of this repository (--resume without a file lets you choose)")


def engine_options(args: argparse.Namespace) -> EngineOptions:
    """The engine the engine flags ask for; `--engine-url` (repeated, or @FILE) makes it the openai engine over
    those servers."""
    kind, base_url = args.engine, args.base_url
    replicas: tuple[str, ...] = ()
    if getattr(args, "engine_url", None):
        from harness.engine.replicas import read_urls

        if args.base_url or args.engine not in ("vllm", "openai"):
            other = "--base-url" if args.base_url else f"--engine {args.engine}"
            raise UsageError(f"--engine-url names the engine's servers; leave out {other}")
        kind, replicas = "openai", tuple(read_urls(args.engine_url))
        base_url = replicas[0] if len(replicas) == 1 else None
    return EngineOptions(kind=kind, replay=args.replay, seconds_per_token=args.seconds_per_token,
                         model=args.model, base_url=base_url, constrained=not args.no_constrain,
                         max_model_len=args.max_model_len, drafts=args.draft,
                         replicas=replicas if len(replicas) > 1 else ())


def check_pacing(knee: int, kv_tokens: int, max_wait: float) -> None:
    """Refuse pacing figures that make no sense (UsageError naming each bad flag, its value and what it must be)."""
    bad = [f"{flag} {value:g} (expected {expected})" for flag, value, expected, ok in (
        ("--knee", knee, "at least 1: requests in flight", knee >= 1),
        ("--kv-tokens", kv_tokens, "at least 1: the engine's KV cache in tokens", kv_tokens >= 1),
        ("--max-wait", max_wait, "seconds above 0", max_wait > 0)) if not ok]
    if bad:
        raise UsageError(f"bad pacing flag{'s' if len(bad) > 1 else ''}: {', '.join(bad)}; give a value in range, "
                         "or leave the flag out for its default")


def cosched_policy(name: str, knee: int, kv_tokens: int, max_wait: float) -> Policy:
    """The co-scheduling policy the flags ask for (`name` one of POLICIES): fcfs, or Pacing with these figures."""
    if name == "fcfs":
        return FCFS()
    check_pacing(knee, kv_tokens, max_wait)
    return Pacing(knee=knee, kv_tokens=kv_tokens, max_wait=max_wait)
