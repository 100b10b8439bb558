"""`tao bench cosched`'s summary: the best swept cap, and Tao's ratios to the best rival and to fcfs."""

from __future__ import annotations

from typing import Any

from harness.bench.cosched import pick_best_cap, ratios, targets


def summary(mean: float, p99: float) -> dict[str, Any]:
    return {"mean": mean, "p99": p99}


def test_the_best_cap_is_the_swept_limit_with_the_lowest_mean() -> None:
    modes = {"cap-16": summary(500, 930), "cap-24": summary(456, 839), "cap-48": summary(1644, 2581)}
    pick_best_cap(modes)
    assert modes["cap"] == {"mean": 456, "p99": 839, "limit": 24}


def test_tao_is_compared_with_the_best_rival_for_each_statistic_and_with_fcfs() -> None:
    modes = {"fcfs": summary(2000, 3000), "cap-24": summary(456, 839), "las": summary(600, 800),
             "ttl": summary(700, 1000), "tao": summary(400, 720), "tao+spec": summary(380, 700)}
    pick_best_cap(modes)
    [row] = ratios([{"sessions": 64, "modes": modes}])
    assert row["best_mean"] == "cap-24" and row["best_p99"] == "las"
    assert row["taospec_best_mean"] == round(380 / 456, 4) and row["taospec_best_p99"] == round(700 / 800, 4)
    assert row["tao_best_mean"] == round(400 / 456, 4) and row["tao_fcfs_mean"] == 0.2
    met = targets([row])
    assert met["mean_le_0.85_best_from_64"]["met"] is True and met["p99_le_0.9_best_from_64"]["met"] is True
    assert met["mean_le_0.5_fcfs_from_64"]["levels"] == {64: 0.19}


def test_a_level_without_rivals_has_no_ratio_to_them() -> None:
    [row] = ratios([{"sessions": 8, "modes": {"fcfs": summary(100, 200), "tao+spec": summary(99, 190)}}])
    assert row["best_mean"] is None and row["taospec_best_mean"] is None and row["taospec_fcfs_mean"] == 0.99
    assert targets([row])["mean_le_0.85_best_from_64"]["met"] is None
