"""Learning a pattern model: the counting pass, then the ranker trained by replaying sessions through the analyzer.

    model = learn(sessions)                  # from other agents' trajectories (`tao traces learn`)
    adapt(model, past_sessions(folder))      # further, on the user's own sessions

Apart from `PatternModel` because training runs the analyzer (`rehearsal.replay` of `patterns.Analyzer`), which
itself reads a `PatternModel`: the model is data the analyzer uses, training is a loop over both.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

from harness.events import Event
from harness.speculation.prediction.pattern_model import PatternModel
from harness.speculation.prediction.patterns import Analyzer
from harness.speculation.prediction.rehearsal import replay  # the same loop the benchmark runs

ADAPT_RATE = 0.1  # ranker step on the user's past sessions: above live learning (0.01), below training (0.3)


def learn(sessions: Iterable[list[Event]], epochs: int = 2, seed: int = 0, folds: int = 4) -> PatternModel:
    """Count patterns over `sessions`, then train the ranker by replaying them.

    The ranker is trained cross-fitted: a session is replayed with counts (control flow, reasoning
    words, habits, runners) taken from the other folds only, so that it learns how far counts carry
    to a session they have never seen, as they must at prediction time. The model keeps the counts
    over all sessions and the one ranker."""
    data = [list(events) for events in sessions]
    model = PatternModel()
    model.count(data)

    folds = max(1, min(folds, len(data) // 2))
    fold_of = [index % folds for index in range(len(data))]
    counted = [model] if folds == 1 else []
    for fold in range(folds if folds > 1 else 0):
        part = PatternModel(ranker=model.ranker)
        part.count([events for events, f in zip(data, fold_of) if f != fold])
        counted.append(part)
    order = list(range(len(data)))
    rng = random.Random(seed)
    for epoch in range(epochs):
        rng.shuffle(order)
        rate = 0.3 / (1 + epoch)
        for index in order:
            replay(Analyzer(counted[fold_of[index] if folds > 1 else 0], learn_rate=rate, shared=True),
                   data[index])
    return model


def adapt(model: PatternModel, sessions: Iterable[list[Event]], rate: float = ADAPT_RATE,
          seconds: float | None = None) -> int:
    """Train `model`'s ranker further on the user's own past sessions; returns how many it took.

    The offline model comes from other agents; this teaches it the user's habits and Tao's own tool
    vocabulary (`run_tests {}` after a targeted run passes), which no bash trajectory shows. Stops
    taking sessions once `seconds` have passed."""
    started, taken = time.perf_counter(), 0
    for events in sessions:
        if seconds is not None and time.perf_counter() - started > seconds:
            break
        replay(Analyzer(model, learn_rate=rate, shared=True), events)
        taken += 1
    return taken
