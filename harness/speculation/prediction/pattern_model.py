"""The learned pattern model: counts and weights mined from trajectories, saved as one small JSON file.

    model = learn(sessions)      # training.learn: counting pass, then the ranker trained by replay
    model.save(path); PatternModel.load(path)

It holds the control-flow counts (`KindModel`), the reasoning word model, the ranker's weights per
moment, the line offsets agents view around a line they were pointed to, the habits common to many
sessions (`git diff`, `ls`, finish), the agents' usual Python interpreter and test runners (with whether
they name tests by dotted labels), and how often the next call is answered by a read of the file in hand.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.events import Event, LLMEnd, SessionStart, ToolCall, ToolResult
from harness.calls.action import TEST, VIEW, Action
from harness.calls.canonical import canonical
from harness.speculation.prediction.controlflow import START, KindModel, WordModel, contexts
from harness.speculation.prediction.extract import path_mentions, reasoning_part
from harness.speculation.prediction.ranker import Ranker
from harness.speculation.prediction.latency import modelled_latency
from harness.speculation.prediction.state import derivable, file_in_hand, output_signal, split_test
from harness.speculation.prediction.testruns import is_dotted, template
from harness.speculation.prediction.turns import in_turn_order

MODEL_VERSION = 1
_HABIT_SHARE = 0.04  # a call is a habit when at least this share of sessions makes it
_MAX_HABITS = 12
_MAX_RUNNERS = 8


# The model Tao ships, used when the user has not learned one of their own. `make patterns` rebuilds it from
# 295 public trajectories: mini-swe-agent's SWE-bench Verified runs with Gemini 3 Pro (MIT, (c) 2025 Kilian A.
# Lieret and Carlos E. Jimenez) and SWE-agent's demonstrations (MIT, (c) 2024 John Yang, Carlos E. Jimenez,
# Alexander Wettig, Shunyu Yao, Karthik Narasimhan, Ofir Press). It holds counts and weights learned from them,
# and the dozen commands at least 4% of those sessions made (`git diff`, `python reproduce_issue.py`).
SHIPPED_MODEL = Path(__file__).with_name("default_patterns.json.gz")


def default_model_path() -> Path:
    """Where the learned model lives: $XDG_CACHE_HOME/tao/patterns.json (default ~/.cache/tao)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tao" / "patterns.json"


def installed_model() -> Path | None:
    """The model a session loads when none is named: the user's own (`tao traces learn`), else the shipped one."""
    return next((path for path in (default_model_path(), SHIPPED_MODEL) if path.is_file()), None)


@dataclass
class PatternModel:
    """Everything the analyzer learned offline."""

    kinds: KindModel = field(default_factory=KindModel)
    words: WordModel = field(default_factory=WordModel)
    ranker: Ranker = field(default_factory=Ranker)
    anchors: list[tuple[int, int]] = field(default_factory=lambda: [(-5, 5), (0, 20)])
    habits: list[dict[str, Any]] = field(default_factory=list)
    interpreter: str = "python"
    runners: list[str] = field(default_factory=lambda: ["pytest"])
    sessions: int = 0
    # Test runners many sessions use, interpreter as a slot: [{"runner", "dotted", "share"}], most used first.
    test_runners: list[dict[str, Any]] = field(default_factory=lambda: [{"runner": "pytest", "dotted": False,
                                                                         "share": 1.0}])
    # How often the next call is a view, read or grep of a file in hand, which a speculated read of that
    # file answers: "<last kind>|same" (the file of the last call), "<last kind>|mention" (the first file
    # its output names) -> [rate, mean modelled seconds of such calls].
    derive: dict[str, list[float]] = field(default_factory=dict)

    def count(self, sessions: list[list[Event]]) -> None:
        """The counting pass: control flow, reasoning words, view offsets, habits, interpreter."""
        offsets: Counter[tuple[int, int]] = Counter()
        habit_sessions: Counter[str] = Counter()
        habit_calls: dict[str, tuple[str, dict[str, Any]]] = {}
        interpreters: Counter[str] = Counter()
        runners: Counter[str] = Counter()
        shapes: Counter[str] = Counter()
        dotted: Counter[str] = Counter()
        derive: dict[str, list[float]] = {}
        for events in sessions:
            self.sessions += 1
            keys = _count_session(self, events, offsets, interpreters, habit_calls, derive)
            habit_sessions.update(keys)
            used = _runners(events)
            runners.update(runner for runner, _ in used)
            shapes.update({template(runner) for runner, _ in used})
            dotted.update({template(runner) for runner, is_dotted in used if is_dotted})
        self.words.prune()
        self.anchors = [pair for pair, _ in offsets.most_common(3)] or self.anchors
        total = max(self.sessions, 1)
        self.habits = [{"name": habit_calls[key][0], "arguments": habit_calls[key][1],
                        "share": round(count / total, 4)}
                       for key, count in habit_sessions.most_common(_MAX_HABITS) if count / total >= _HABIT_SHARE]
        self.derive = {key: [round(hits / total, 4), round(seconds / hits, 4)]
                       for key, (total, hits, seconds) in derive.items() if total >= 20 and hits}
        if interpreters:
            self.interpreter = interpreters.most_common(1)[0][0]
        if runners:
            self.runners = [runner for runner, _ in runners.most_common(2)]
        if shapes:
            self.test_runners = [{"runner": shape, "dotted": dotted[shape] * 2 > count,
                                  "share": round(count / total, 4)}
                                 for shape, count in shapes.most_common(_MAX_RUNNERS) if count >= 2]

    def to_json(self) -> dict[str, Any]:
        """The model as a JSON object."""
        return {"version": MODEL_VERSION, "sessions": self.sessions, "interpreter": self.interpreter,
                "runners": self.runners, "test_runners": self.test_runners, "derive": self.derive,
                "anchors": self.anchors, "habits": self.habits, "ranker": self.ranker.to_json(),
                "kinds": self.kinds.to_json(), "words": self.words.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PatternModel:
        """A model from its JSON object; ValueError for another version."""
        if data.get("version") != MODEL_VERSION:
            raise ValueError(f"pattern model version {data.get('version')} is not {MODEL_VERSION}")
        words = data.get("words") or {}
        return cls(KindModel(data.get("kinds")), WordModel(words.get("counts"), words.get("totals")),
                   Ranker(data.get("ranker")), [tuple(p) for p in data.get("anchors", [])],
                   list(data.get("habits", [])), str(data.get("interpreter", "python")),
                   list(data.get("runners", ["pytest"])), int(data.get("sessions", 0)),
                   list(data.get("test_runners") or [{"runner": "pytest", "dotted": False, "share": 1.0}]),
                   dict(data.get("derive") or {}))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model atomically (a temporary file, then a rename); gzipped when the name ends in .gz,
        byte for byte the same for the same model."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        data = json.dumps(self.to_json(), separators=(",", ":")).encode("utf-8")
        tmp.write_bytes(gzip.compress(data, mtime=0) if target.suffix == ".gz" else data)
        tmp.replace(target)
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PatternModel:
        """Read a saved model (a few hundred kB, a few ms), gzipped or not."""
        data = Path(path).read_bytes()
        return cls.from_json(json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data))


def _count_session(model: PatternModel, events: list[Event], offsets: Counter[tuple[int, int]],
                   interpreters: Counter[str], habit_calls: dict[str, tuple[str, dict[str, Any]]],
                   derive: dict[str, list[float]]) -> set[str]:
    """Count one session into the model; returns the keys it called (for habits)."""
    root, text, keys = "", "", set()
    history: list[tuple[Action, bool | None, str]] = []
    placed: dict[str, int] = {}  # a call's id -> its place in history (a turn's results come after all its calls)
    last_mentions: list[tuple[str, int | None]] = []
    for event in in_turn_order(events):  # a call's context is what the model knew: not its siblings' results
        if isinstance(event, SessionStart):
            root = event.repo
        elif isinstance(event, LLMEnd):
            text = event.text
        elif isinstance(event, ToolCall):
            action = canonical(event.name, event.arguments, root)
            k1 = history[-1] if history else None
            k2 = history[-2][0].kind if len(history) > 1 else START
            ctx = contexts(k2, k1[0].kind if k1 else START, status(k1[1] if k1 else None), k1[2] if k1 else "none")
            model.kinds.add(ctx, action.kind)
            model.words.add(reasoning_part(text, str(event.arguments.get("command", ""))), action.kind)
            placed[event.call_id] = len(history)
            history.append((action, None, "none"))
            keys.add(action.key)
            habit_calls.setdefault(action.key, (action.tool, dict(event.arguments) if action.tool == "bash"
                                                else dict(action.args)))
            _count_offsets(action, last_mentions, offsets)
            if k1 is not None:
                _count_derive(k1[0], last_mentions, action, derive)
            word = str(event.arguments.get("command", "")).split(maxsplit=1)[:1]
            if action.kind == "script" and word and word[0].startswith("python"):
                interpreters[word[0]] += 1
        elif isinstance(event, ToolResult) and history:
            ok = (not event.is_error) if event.exit_code is None else event.exit_code == 0
            at = placed.get(event.call_id, len(history) - 1)
            history[at] = (history[at][0], ok, output_signal(event.output, not event.output.strip()))
            last_mentions = path_mentions(event.output[:20_000], root)
    return keys


def _count_derive(last: Action, mentions: list[tuple[str, int | None]], action: Action,
                  derive: dict[str, list[float]]) -> None:
    """Count whether `action` is answered by a read of the file in hand after `last` (see `derive`)."""
    files = {"same": file_in_hand(last), "mention": next((p for p, _ in mentions if "." in p.rsplit("/", 1)[-1]), None)}
    if files["mention"] == files["same"]:
        files["mention"] = None
    for relation, path in files.items():
        if path:
            row = derive.setdefault(f"{last.kind}|{relation}", [0, 0, 0.0])
            row[0] += 1
            if derivable(action, path):
                row[1] += 1
                row[2] += modelled_latency(action)


def _runners(events: list[Event]) -> set[tuple[str, bool]]:
    """The test runners a session used, with whether it named targets by dotted labels (once per session)."""
    root = next((e.repo for e in events if isinstance(e, SessionStart)), "")
    found = set()
    for event in events:
        if isinstance(event, ToolCall):
            action = canonical(event.name, event.arguments, root)
            if action.kind == TEST and action.args.get("command"):
                runner, target = split_test(str(action.args["command"]))
                if target:
                    found.add((runner, is_dotted(runner, target)))
    return found


def _count_offsets(action: Action, mentions: list[tuple[str, int | None]], offsets: Counter[tuple[int, int]]) -> None:
    if action.kind != VIEW or action.tool != "read_file" or action.args.get("end_line") is None:
        return
    lines = [line for path, line in mentions if line is not None and path == action.path]
    if lines:
        start = action.args.get("start_line") or 1
        anchor = min(lines, key=lambda line: abs(line - start))
        offsets[(start - anchor, action.args["end_line"] - anchor)] += 1


def status(ok: bool | None) -> str:
    """How the last call ended, as a control-flow context word."""
    return "na" if ok is None else ("ok" if ok else "fail")
