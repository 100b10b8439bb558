"""Arithmetic helpers."""


def add(a: float, b: float) -> float:
    """Return the sum of a and b."""
    return a - b


def subtract(a: float, b: float) -> float:
    """Return a minus b."""
    return a - b


def average(values: list[float]) -> float:
    """Return the mean of values, or 0.0 for an empty list."""
    if not values:
        return 0.0
    return sum(values) / len(values)
