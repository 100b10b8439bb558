"""Control-flow patterns: which kind of action follows the recent ones, and which the reasoning names.

`KindModel` counts the next action's kind after contexts of growing length (the last kind; with its
exit status; with the gist of its output, such as a traceback or an empty output; the two last kinds) and
interpolates them, so rare contexts fall back to shorter ones. `WordModel` is a naive Bayes over the
words of the streamed reasoning. Both learn offline from trajectories and online from the live session.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

from harness.calls.action import KINDS

START = "start"
_WORD = re.compile(r"[a-z][a-z_]{1,24}")
_SMOOTH = 2.0


def contexts(k2: str, k1: str, status: str, signal: str) -> tuple[str, ...]:
    """Context keys from the longest to the shortest; `signal` is the gist of the last output."""
    return (f"{k2}|{k1}|{status}|{signal}", f"{k1}|{status}|{signal}", f"{k1}|{status}", k1)


class KindModel:
    """P(next kind | recent actions), interpolated over context lengths, with a local (session) layer."""

    def __init__(self, counts: dict[str, dict[str, float]] | None = None, local_weight: float = 3.0) -> None:
        self.counts: dict[str, dict[str, float]] = defaultdict(dict)
        self.counts.update(counts or {})
        self.local: dict[str, dict[str, float]] = defaultdict(dict)
        self.local_weight = local_weight
        self._cache: dict[tuple[str, ...], dict[str, float]] = {}

    def add(self, ctx: tuple[str, ...], kind: str, local: bool = False) -> None:
        """Count one transition (in the session layer when `local`)."""
        table = self.local if local else self.counts
        self._cache.clear()
        for key in (*ctx, ""):
            row = table[key]
            row[kind] = row.get(kind, 0.0) + 1.0

    def distribution(self, ctx: tuple[str, ...], cache: bool = False) -> dict[str, float]:
        """P(kind | ctx) for every kind; with `cache`, remembered per context (valid while counts are fixed)."""
        if cache:
            found = self._cache.get(ctx)
            if found is None:
                found = self._cache[ctx] = self.distribution(ctx)
            return found
        probs = {kind: 1.0 / len(KINDS) for kind in KINDS}
        for key in ("", *reversed(ctx)):
            row, local = self.counts.get(key, {}), self.local.get(key, {})
            total = sum(row.values()) + self.local_weight * sum(local.values())
            if not total:
                continue
            probs = {kind: (row.get(kind, 0.0) + self.local_weight * local.get(kind, 0.0) + _SMOOTH * p)
                     / (total + _SMOOTH) for kind, p in probs.items()}
        return probs

    def to_json(self) -> dict[str, Any]:
        """The global counts (the session layer is never saved)."""
        return {k: v for k, v in self.counts.items() if v}


class WordModel:
    """Naive Bayes P(kind | words of the reasoning), over a vocabulary kept small when saved."""

    def __init__(self, counts: dict[str, dict[str, float]] | None = None,
                 totals: dict[str, float] | None = None) -> None:
        self.counts: dict[str, dict[str, float]] = defaultdict(dict)
        self.counts.update(counts or {})  # word -> kind -> count
        self.totals: dict[str, float] = dict(totals or {})  # kind -> words counted
        self._vectors: dict[str, tuple[float, ...]] | None = None  # word -> log likelihood per kind

    @staticmethod
    def words(text: str, tail: int = 300) -> set[str]:
        """The distinct lower-case words of the end of the reasoning, where the next step is announced."""
        return set(_WORD.findall(text[-tail:].lower()))

    def add(self, text: str, kind: str) -> None:
        """Count the words of one reasoning text for the kind of call that followed it."""
        self._vectors = None
        for word in self.words(text):
            row = self.counts[word]
            row[kind] = row.get(kind, 0.0) + 1.0
            self.totals[kind] = self.totals.get(kind, 0.0) + 1.0

    def log_odds(self, words: set[str]) -> dict[str, float]:
        """Per kind, the summed log likelihood of the words, centred over kinds (0 when nothing is known)."""
        if self._vectors is None:
            self._vectors = self._precompute()
        sums = [0.0] * len(KINDS)
        vectors = self._vectors
        for word in words:
            vector = vectors.get(word)
            if vector is not None:
                for index, value in enumerate(vector):
                    sums[index] += value
        mean = sum(sums) / len(sums)
        return {kind: value - mean for kind, value in zip(KINDS, sums)}

    def _precompute(self) -> dict[str, tuple[float, ...]]:
        vocab = max(len(self.counts), 1)
        denominators = [math.log(self.totals.get(kind, 0.0) + 0.5 * vocab) for kind in KINDS]
        return {word: tuple(math.log(row.get(kind, 0.0) + 0.5) - den for kind, den in zip(KINDS, denominators))
                for word, row in self.counts.items()}

    def prune(self, min_count: float = 5.0) -> None:
        """Drop rare words so the saved model stays small."""
        self.counts = defaultdict(dict, {w: r for w, r in self.counts.items() if sum(r.values()) >= min_count})
        self._vectors = None

    def to_json(self) -> dict[str, Any]:
        """Word counts per kind and the totals; words in sorted order, so that the saved bytes do not depend on
        the order a set of words happened to iterate in (it changes with Python's hash seed)."""
        return {"counts": {word: self.counts[word] for word in sorted(self.counts)}, "totals": self.totals}
