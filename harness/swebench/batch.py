"""The batch runner: N workers take instances from a queue, each in its own worktree, all sessions on
one engine through the co-scheduler: its own, or on a `tao serve` gateway the gateway's (which paces the
batch with every other session on the machine; a second co-scheduler in front of it would only add a queue).

Nothing done is lost: an instance's outputs are written as it finishes, each file atomically, and
`result.json` last, so its presence means the instance is done; preds.jsonl, preds.json and the run
summary are rewritten after every instance. A rerun skips done instances (unless `redo`) and grades
those that lack a report when asked to evaluate. Bad input (no clone, unknown commit, a patch that does
not apply, tests that hang) marks that instance with the reason and the run goes on. Cancelling (Ctrl+C)
stops the running sessions, keeps what finished, and leaves the rest for the rerun.

Output folder:

    preds.jsonl, preds.json          predictions in the official format
    summary.json                     the run summary (status, steps, time, speculation, resolved)
    <model>.<run_id>.json            the run report in the official harness's shape (with evaluate)
    instances/<id>/result.json       how the instance ended, its patch, its numbers
    instances/<id>/trajectory.jsonl  the session's events
    instances/<id>/report.json       the evaluation report (with evaluate), eval.log its test output
    worktrees/<id>                   the instance's worktree while it runs (kept with keep_worktrees)
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.coscheduler import FCFS, CoScheduler, Policy
from harness.engine.api import Engine, replica_of
from harness.events import Event, SessionEnd, SpecSummary, TrajectoryWriter
from harness.launch import SessionOptions, open_session
from harness.session import EventSink, SessionConfig
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer
from harness.swebench import official
from harness.swebench.evaluate import DEFAULT_EVAL_TIMEOUT, evaluate, failed
from harness.swebench.instances import Instance
from harness.swebench.progress import BatchProgress
from harness.swebench.worktrees import SetupError, add_worktree, find_clone, remove_worktree
from harness.vocabulary import Status
from sandbox import Workspace
from tools import DEFAULT_TEST_TIMEOUT, default_tools


GATEWAY_POLICY = "tao serve"  # the summary's policy when the gateway's co-scheduler paces the batch


def paced_by_gateway(engine: Engine) -> bool:
    """True when the engine is a `tao serve` gateway's client: the gateway paces, each session its own view."""
    return getattr(engine, "gateway", False) is True


@dataclass(frozen=True)
class BatchConfig:
    """How a batch runs and where it writes."""

    output: Path
    """Folder for predictions, trajectories, reports and worktrees."""
    repos: Path
    """Folder with local clones: repos/owner/name, repos/owner__name or repos/name."""
    workers: int = 1
    """Instances worked on at once."""
    redo: bool = False
    """Run every instance again, even those a previous run finished."""
    evaluate: bool = False
    """Grade each prediction (test_patch, FAIL_TO_PASS, PASS_TO_PASS) after its session."""
    session: SessionConfig = SessionConfig()
    """Limits of each session."""
    speculation: bool = True
    """Run predicted tool calls ahead of the model."""
    warm: bool = True
    """Pre-fill the next prompt on a guessed observation while a test runs."""
    patterns: PatternModel | None = None
    """The learned pattern model for speculation (None: rules and online learning only)."""
    test_command: str | None = None
    """The agent's run_tests command (None: detected per worktree)."""
    test_timeout: float = DEFAULT_TEST_TIMEOUT
    """Seconds an agent's test run may take."""
    eval_timeout: float = DEFAULT_EVAL_TIMEOUT
    """Seconds the evaluation's test run may take before its process group is killed."""
    eval_command: str | None = None
    """The evaluation's test runner, given test ids as arguments (None: pytest -rA)."""
    model_name: str = "tao"
    """model_name_or_path in the predictions."""
    run_id: str = "tao"
    """Names the run report, as the official harness's --run_id does."""
    keep_worktrees: bool = False
    """Keep each instance's worktree after it is done (for inspection)."""


@dataclass
class Layout:
    """Where each output of a batch goes."""

    root: Path

    def instance(self, instance_id: str) -> Path:
        return self.root / "instances" / instance_id

    def result(self, instance_id: str) -> Path:
        return self.instance(instance_id) / "result.json"

    def trajectory(self, instance_id: str) -> Path:
        return self.instance(instance_id) / "trajectory.jsonl"

    def report(self, instance_id: str) -> Path:
        return self.instance(instance_id) / "report.json"

    def eval_log(self, instance_id: str) -> Path:
        return self.instance(instance_id) / "eval.log"

    def worktree(self, instance_id: str) -> Path:
        return self.root / "worktrees" / instance_id


def write_atomic(path: Path, text: str) -> None:
    """Write a file so that a reader (or a crash) sees the old content or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def read_json(path: Path) -> Any | None:
    """A JSON file's content, or None if it is missing or damaged (then the instance is run again)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass
class Batch:
    """Runs instances through sessions that share one engine via the co-scheduler."""

    instances: list[Instance]
    engine: Engine
    config: BatchConfig
    policy: Policy = field(default_factory=FCFS)
    progress: BatchProgress | None = None

    def __post_init__(self) -> None:
        self.layout = Layout(self.config.output)
        self.cosched = CoScheduler(self.engine, self.policy)
        self.replica_coscheds: dict[int, CoScheduler] = {}  # replicas that are no gateway: a co-scheduler each
        self.paced_by_gateway = paced_by_gateway(self.engine)
        self.results: dict[str, dict[str, Any]] = {}
        self.reports: dict[str, dict[str, Any]] = {}
        self.failures: dict[str, official.Failure] = {}  # what an unresolved instance's log suggests went wrong
        self._write_lock = asyncio.Lock()
        self._t0 = time.monotonic()

    def load_done(self) -> None:
        """Results and reports a previous run left, unless redoing."""
        for instance in self.instances:
            if self.config.redo:
                continue
            result = read_json(self.layout.result(instance.instance_id))
            if isinstance(result, dict) and result.get("instance_id") == instance.instance_id:
                self.results[instance.instance_id] = result
                report = read_json(self.layout.report(instance.instance_id))
                if isinstance(report, dict) and instance.instance_id in report:
                    self.graded(instance.instance_id, report[instance.instance_id])

    def todo(self) -> list[tuple[Instance, bool]]:
        """(instance, run the agent?) for every instance that needs work: a session, or only grading."""
        work = []
        for instance in self.instances:
            result = self.results.get(instance.instance_id)
            if result is None:
                work.append((instance, True))
            elif (self.config.evaluate and instance.instance_id not in self.reports
                  and result.get("stage") != "setup"):
                work.append((instance, False))
        return work

    async def run(self) -> dict[str, Any]:
        """Work through every instance; returns the run summary (also written to summary.json)."""
        self.config.output.mkdir(parents=True, exist_ok=True)
        self.load_done()
        queue: asyncio.Queue[tuple[Instance, bool]] = asyncio.Queue()
        todo = self.todo()
        for item in todo:
            queue.put_nowait(item)
        if self.progress is not None:
            self.progress.done = len(self.results) - sum(1 for _, agent in todo if not agent)
        self._t0 = time.monotonic()
        workers = [asyncio.create_task(self.worker(queue)) for _ in range(max(1, self.config.workers))]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            summary = await self.write_outputs()
        return summary

    async def worker(self, queue: asyncio.Queue[tuple[Instance, bool]]) -> None:
        while not queue.empty():
            instance, agent = queue.get_nowait()
            await self.work_on(instance, agent)

    async def work_on(self, instance: Instance, agent: bool) -> None:
        """Set up, run the session (if `agent`), grade (if asked), write; every failure ends up in the result."""
        iid = instance.instance_id
        tree = self.layout.worktree(iid)
        clone: Path | None = None
        result = self.results.get(iid) if not agent else None
        try:
            clone = await asyncio.to_thread(find_clone, self.config.repos, instance.repo)
            await asyncio.to_thread(add_worktree, clone, instance.base_commit, tree)
            if result is None:
                result = await self.run_session(instance, tree)
            if self.config.evaluate:
                await self.grade(instance, tree, result)
        except SetupError as exc:
            result = result or self.failed(instance, "setup", str(exc))
            if not agent:  # grading a finished prediction could not set up: say so in its report
                await self.grade_failed(instance, result, str(exc))
        except Exception as exc:  # a bug or an OS failure ends this instance, not the run
            reason = f"the harness failed: {exc!r}"
            if result is None:
                result = self.failed(instance, "harness", reason)
            else:
                result["harness_error"] = reason
        finally:
            if clone is not None and not self.config.keep_worktrees:
                await self.remove(clone, tree)
        await self.finish(instance, result)

    async def remove(self, clone: Path, tree: Path) -> None:
        """Remove a done instance's worktree; a failure only leaves it behind (the next run replaces it)."""
        try:
            await asyncio.to_thread(remove_worktree, clone, tree)
        except Exception as exc:
            if self.progress is not None:
                self.progress.console.print(f"tao: could not remove the worktree {tree} ({exc}); remove it by hand")

    async def run_session(self, instance: Instance, tree: Path) -> dict[str, Any]:
        """One session on the instance's worktree; the result it leaves."""
        path = self.layout.trajectory(instance.instance_id)
        for stale in (path, self.layout.report(instance.instance_id), self.layout.eval_log(instance.instance_id)):
            stale.unlink(missing_ok=True)  # a rerun starts afresh
        writer = TrajectoryWriter(path)
        spec: dict[str, Any] = {}

        def record(event: Event) -> None:
            if isinstance(event, SpecSummary):
                spec.update(launched=event.launched, promoted=event.promoted, discarded=event.discarded,
                            saved=round(event.saved, 3), wasted=round(event.wasted, 3))

        sinks: list[EventSink] = [writer.write, record]
        if self.progress is not None:
            sinks.append(self.progress.sink(instance.instance_id))
        workspace = Workspace(tree)
        analyzer = Analyzer(self.config.patterns) if self.config.speculation else None
        tools = default_tools(test_command=self.config.test_command, test_timeout=self.config.test_timeout)
        t0 = time.monotonic()
        try:
            # no approval policy (nobody to ask: every call runs) and no provisional step, as batch runs always had
            options = SessionOptions(config=self.config.session, approvals=None, warm=self.config.warm,
                                     provisional=False)
            engine = self.session_engine(instance.instance_id)
            end: SessionEnd = await open_session(options, instance.task, engine, workspace, sinks, tools=tools,
                                                 analyzer=analyzer).run()
        finally:
            writer.close()
            workspace.close()
        return {"instance_id": instance.instance_id, "stage": "session", "status": end.status, "reason": end.reason,
                "summary": end.summary, "steps": end.steps, "seconds": round(time.monotonic() - t0, 3),
                "output_tokens": end.output_tokens, "speculation": spec, "model_patch": end.submission}

    def session_engine(self, instance_id: str) -> Engine:
        """The engine one instance's session talks to. On gateways, the engine itself: they pace, and each session
        gets its own view (pinned to one replica when there are several). Else through a co-scheduler here: over
        the one engine, or over the replica the session is pinned to (one co-scheduler per replica)."""
        if self.paced_by_gateway:
            return self.engine
        replica = replica_of(self.engine, instance_id)
        if replica is self.engine:
            return self.cosched.engine_for(instance_id)
        cosched = self.replica_coscheds.setdefault(id(replica), CoScheduler(replica, self.policy))
        return cosched.engine_for(instance_id)

    def failed(self, instance: Instance, stage: str, reason: str) -> dict[str, Any]:
        return {"instance_id": instance.instance_id, "stage": stage, "status": Status.ERROR, "reason": reason,
                "summary": "", "steps": 0, "seconds": 0.0, "output_tokens": 0, "speculation": {}, "model_patch": ""}

    async def grade(self, instance: Instance, tree: Path, result: dict[str, Any]) -> None:
        """Evaluate the prediction in the worktree; write eval.log and report.json."""
        iid = instance.instance_id
        entry = await evaluate(instance, tree, result.get("model_patch"), self.config.eval_timeout,
                               self.layout.eval_log(iid), self.config.eval_command)
        write_json(self.layout.report(iid), {iid: entry})
        self.graded(iid, entry)

    async def grade_failed(self, instance: Instance, result: dict[str, Any], reason: str) -> None:
        """Report a finished prediction that could not be graded: its repository could not be set up."""
        iid = instance.instance_id
        entry = await asyncio.to_thread(failed, instance, result.get("model_patch") or "", self.layout.eval_log(iid),
                                        official.reset_failed_log(reason), reason)
        write_json(self.layout.report(iid), {iid: entry})
        self.graded(iid, entry)

    def graded(self, instance_id: str, entry: dict[str, Any]) -> None:
        """Keep an instance's report and, when grading, what its log suggests went wrong unless it is resolved
        (read once here rather than at every run report)."""
        self.reports[instance_id] = entry
        self.failures.pop(instance_id, None)
        if self.config.evaluate and not entry.get("resolved"):
            if found := official.classify(self.layout.eval_log(instance_id)):
                self.failures[instance_id] = found

    async def finish(self, instance: Instance, result: dict[str, Any]) -> None:
        """Record a done instance: result.json (last of its files), then the predictions and summary."""
        report = self.reports.get(instance.instance_id)
        result["resolved"] = None if report is None else bool(report.get("resolved"))
        if report is not None and "error" in report:
            result["evaluation_error"] = report["error"]
        write_json(self.layout.result(instance.instance_id), result)
        self.results[instance.instance_id] = result
        if self.progress is not None:
            note = {True: "resolved", False: "not resolved", None: ""}[result["resolved"]]
            self.progress.finished(instance.instance_id, result["status"],
                                   note if result["stage"] != "setup" else result["reason"])
        await self.write_outputs()

    async def write_outputs(self) -> dict[str, Any]:
        """Predictions, run summary and (with evaluation) the run report, from every result so far."""
        async with self._write_lock:
            ordered = [self.results[i.instance_id] for i in self.instances if i.instance_id in self.results]
            preds = [{"instance_id": r["instance_id"], "model_name_or_path": self.config.model_name,
                      "model_patch": r.get("model_patch") or ""} for r in ordered]
            write_atomic(self.config.output / "preds.jsonl", "".join(json.dumps(p) + "\n" for p in preds))
            write_json(self.config.output / "preds.json", preds)
            summary = self.summary(ordered, time.monotonic() - self._t0)
            write_json(self.config.output / "summary.json", summary)
            if self.config.evaluate:
                report = official.run_report([i.instance_id for i in self.instances],
                                             {p["instance_id"]: p["model_patch"] for p in preds}, self.reports,
                                             [r["instance_id"] for r in ordered if r.get("stage") != "session"],
                                             self.failures)
                name = self.config.model_name.replace("/", "__")
                write_json(self.config.output / f"{name}.{self.config.run_id}.json", report)
            return summary

    def summary(self, ordered: list[dict[str, Any]], wall: float) -> dict[str, Any]:
        """The run summary: counts by status, resolved, steps, time and speculation over all instances."""
        spec: Counter[str] = Counter()
        for result in ordered:
            spec.update({k: v for k, v in result.get("speculation", {}).items() if isinstance(v, (int, float))})
        evaluated = [r for r in ordered if r.get("resolved") is not None]
        return {
            "instances": len(self.instances), "done": len(ordered),
            "status": dict(Counter(r["status"] for r in ordered)),
            "evaluated": len(evaluated), "resolved": sum(1 for r in evaluated if r["resolved"]),
            "steps": sum(r.get("steps", 0) for r in ordered),
            "session_seconds": round(sum(r.get("seconds", 0.0) for r in ordered), 3),
            "wall_seconds": round(wall, 3),  # of this run (a resumed run counts from its own start)
            "speculation": {k: round(v, 3) for k, v in spec.items()},
            "workers": self.config.workers, "engine": self.engine.name,
            "policy": GATEWAY_POLICY if self.paced_by_gateway else self.policy.name,
            "speculation_on": self.config.speculation, "model_name_or_path": self.config.model_name,
            "results": [{"instance_id": r["instance_id"], "status": r["status"], "reason": r["reason"],
                         "steps": r.get("steps", 0), "seconds": r.get("seconds", 0.0), "resolved": r.get("resolved"),
                         "speculation_hits": r.get("speculation", {}).get("promoted", 0)} for r in ordered],
        }
