"""A linear ranker over candidate features, with a softmax against "none of these" per decision.

Each candidate is a sparse feature dict; its score is the dot product with the moment's weights and
its probability is exp(score) / (1 + sum of exp over the candidates): the 1 stands for the chance that
the next call is none of them. Weights are learned by Adagrad on the listwise log loss, offline from
trajectories and online from the live session (one small step per executed call).
"""

from __future__ import annotations

import math
from typing import Any

Features = dict[str, float]


class Ranker:
    """Per-moment weight vectors over named features."""

    def __init__(self, weights: dict[str, dict[str, float]] | None = None, rate: float = 0.1) -> None:
        self.weights: dict[str, dict[str, float]] = {m: dict(w) for m, w in (weights or {}).items()}
        self.rate = rate
        self._g2: dict[str, dict[str, float]] = {}

    def scores(self, moment: str, features: list[Features]) -> list[float]:
        """Each candidate's dot product with the moment's weights."""
        get = self.weights.get(moment, {}).get
        out = []
        for feats in features:
            total = 0.0
            for name, value in feats.items():
                weight = get(name)
                if weight is not None:
                    total += weight * value
            out.append(total)
        return out

    def probabilities(self, moment: str, features: list[Features]) -> list[float]:
        """Softmax of the scores against a fixed "none of these" score of 0."""
        scores = self.scores(moment, features)
        if not scores:
            return []
        top = max(0.0, max(scores))
        exps = [math.exp(s - top) for s in scores]
        total = math.exp(-top) + sum(exps)
        return [e / total for e in exps]

    def update(self, moment: str, features: list[Features], target: int | None, rate: float | None = None,
               l2: float = 1e-4, probs: list[float] | None = None) -> float:
        """One Adagrad step on the listwise log loss; `target` is the right candidate's index or None.

        `probs` are the probabilities just computed for these features, if the caller has them."""
        if not features:
            return 0.0
        probs = probs if probs is not None else self.probabilities(moment, features)
        weights = self.weights.setdefault(moment, {})
        g2 = self._g2.setdefault(moment, {})
        grads: dict[str, float] = {}
        for index, (feats, prob) in enumerate(zip(features, probs)):
            error = prob - (1.0 if index == target else 0.0)
            if abs(error) < 1e-6:
                continue
            for name, value in feats.items():
                grads[name] = grads.get(name, 0.0) + error * value
        step = self.rate if rate is None else rate
        for name, grad in grads.items():
            grad += l2 * weights.get(name, 0.0)
            g2[name] = g2.get(name, 0.0) + grad * grad
            weights[name] = weights.get(name, 0.0) - step * grad / (math.sqrt(g2[name]) + 1e-8)
        chosen = probs[target] if target is not None else 1.0 - sum(probs)
        return -math.log(max(chosen, 1e-12))

    def to_json(self) -> dict[str, Any]:
        """The weights, rounded, without the ones that stayed near zero."""
        return {m: {k: round(v, 5) for k, v in w.items() if abs(v) > 1e-5} for m, w in self.weights.items()}
