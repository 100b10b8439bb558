"""`tao demo`: Tao at work on the bundled example, with answers that are known in advance and a real engine.

    plan = prepare(args)        # a fresh git copy of examples/calc; which answers, said in plain words
    run_headless(args, plan)    # the human log, speculations included, then the recap and the closing hints

On a terminal the same plan opens the TUI (tui.demo_app). The embedded 135M model cannot fix a bug on its own,
so by default the answers come from a script (examples/calc.replay.json) forced token by token through the
real vLLM engine: the model's time, the tools, the speculation and the time it saves are all real, only the
words are fixed. The script's calls are ordinary agent steps (run the tests, find the function, read it,
edit it, run the tests again, finish); the predictor is not told about them.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.approval import ApprovalPolicy, load_policy
from harness.engine.embedded_model import MODEL_NAME
from harness.errors import UsageError
from harness.events import Event, SpecDiscard, SpecLaunch, SpecPromote, ToolResult
from harness.log import HumanLog, counted
from harness.vocabulary import EXIT_CODES

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPT = EXAMPLES / "calc.replay.json"
APPROVAL_MODE = "auto-edit"  # the scripted edit runs without a question; a shell command would still ask
CLOSING = (
    'Run the embedded model freely: `tao` in your own repository (the TUI), or `tao run "TASK"` (headless).',
    "Point Tao at a real model: `tao --model DIR` (a local model directory for vLLM), "
    "or `tao --engine openai --base-url URL` (any OpenAI-compatible server).",
)


@dataclass(frozen=True)
class DemoPlan:
    """What the demo runs: where, on which task, and how it says where the answers come from."""

    repo: Path
    task: str
    answers: str  # one sentence: scripted or recorded, forced through the real engine or replayed, or the model's own
    approvals: str  # one sentence: what runs without asking, and why that is safe here


def fresh_example(parent: Path) -> Path:
    """A committed copy of examples/calc (without its ISSUE.md) in a new git repository `parent`/calc."""
    repo = parent / "calc"
    shutil.copytree(EXAMPLES / "calc", repo, ignore=shutil.ignore_patterns("ISSUE.md", "__pycache__"))
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=tao", "-c", "user.email=tao@localhost", "commit", "-qm", "demo"]):
        subprocess.run(cmd, cwd=repo, check=True)
    return repo


def prepare(args: argparse.Namespace) -> DemoPlan:
    """Copy the example to a fresh git repository and choose the answers (sets `args.replay` to the script)."""
    source = EXAMPLES / "calc"
    if not source.is_dir():
        raise UsageError(f"the demo example is missing ({source}); run tao demo from a source checkout")
    if args.engine in ("vllm", "replay") and args.replay is None:
        args.replay = SCRIPT
    repo = fresh_example(Path(tempfile.mkdtemp(prefix="tao-demo-")))
    approvals = (f"Approval mode {APPROVAL_MODE}: the edit runs without asking (this is a throwaway copy); "
                 "a shell command would still ask.")
    return DemoPlan(repo, (source / "ISSUE.md").read_text(encoding="utf-8"), answers(args), approvals)


def answers(args: argparse.Namespace) -> str:
    """Where the demo's answers come from, in plain words."""
    kind = "recorded (a saved trajectory)" if args.replay and args.replay.suffix == ".jsonl" else "scripted"
    name = args.replay.name if args.replay else ""
    if args.engine == "replay":
        return (f"The answers are {kind} ({name}) and replayed without a model: the tools and the speculation "
                "are real, the model's time is not.")
    if args.engine == "openai":
        return f"The answers are the model's own, from the server at {args.base_url}; nothing is scripted."
    model = Path(args.model).name if args.model else f"the embedded {MODEL_NAME.split('-Q')[0]}"
    return (f"The answers are {kind} ({name}) and forced token by token through the real vLLM engine running "
            f"{model}; the tools, the speculation and the timing are real.")


def demo_policy(repo: Path, yolo: bool, mode: str | None = None) -> ApprovalPolicy:
    """The user's approval policy, loosened to auto-edit for the demo's throwaway copy (unless --mode or --yolo
    says otherwise)."""
    policy = load_policy(repo, yolo, mode)
    return policy if yolo or mode else ApprovalPolicy(APPROVAL_MODE, policy.allow, policy.headless)


@dataclass
class Recap:
    """What the demo showed, gathered from its events as they come: the test runs, the speculations, the time hidden."""

    tests: list[tuple[int, bool]] = field(default_factory=list)  # (step, passed) of each run_tests
    launched: int = 0
    promoted: int = 0
    discarded: int = 0
    saved: float = 0.0  # seconds of tool time the promoted speculations hid behind the model

    def __call__(self, event: Event) -> None:
        match event:
            case ToolResult(name="run_tests"):
                self.tests.append((event.step, not event.is_error and event.exit_code in (None, 0)))
            case SpecLaunch():
                self.launched += 1
            case SpecPromote():
                self.promoted += 1
                self.saved += event.saved
            case SpecDiscard():
                self.discarded += 1

    def lines(self) -> list[str]:
        """Two lines: the tests from red to green, and what speculation did and saved."""
        runs = " -> ".join(f"{'passing' if ok else 'failing'} at step {step}" for step, ok in self.tests)
        return [f"Tests: {runs or 'not run'}.",
                f"Speculation: {self.launched} launched, {self.promoted} promoted, {self.discarded} discarded; "
                f"{self.saved:.1f} s of tool time hidden behind the model."]


class DemoLog(HumanLog):
    """The human log, plus each speculation as it starts and when it is thrown away (the TUI's pane, in lines)."""

    def format(self, event: Event) -> str | None:
        stamp = f"[{event.t:7.2f}s]"
        match event:
            case SpecLaunch():
                args = ", ".join(f"{k}={v[:40]!r}" if isinstance(v, str) else f"{k}={v!r}"
                                 for k, v in event.arguments.items())
                return f"{stamp}    speculating: {event.name}({args}) [{event.reason}, p={event.probability:.2f}]"
            case SpecDiscard():
                return f"{stamp}    speculation {event.spec_id} discarded: {event.reason} (the workspace is untouched)"
        return super().format(event)


def run_headless(args: argparse.Namespace, plan: DemoPlan) -> int:
    """Run the plan with the human log on stderr, then say what it showed and how to go on."""
    from harness.headless import run_session

    print(f"Tao demo in {plan.repo} (a fresh copy of examples/calc).\n{plan.answers}\n{plan.approvals}",
          file=sys.stderr, flush=True)
    recap, log = Recap(), DemoLog(sys.stderr)

    def sink(event: Event) -> None:
        recap(event)
        log(event)

    end = asyncio.run(run_session(plan.task, plan.repo, args, log=sink,
                                  approval=demo_policy(plan.repo, args.yolo, args.mode)))
    changed = counted(len([line for line in end.submission.splitlines() if line.startswith("+++ ")]), "file")
    print(f"\nThe demo {end.status} after {counted(end.steps, 'step')}; {changed} changed.", file=sys.stderr)
    for line in (*recap.lines(), plan.answers, *CLOSING):
        print(line, file=sys.stderr)
    return EXIT_CODES.get(end.status, 1)  # finished: 0
