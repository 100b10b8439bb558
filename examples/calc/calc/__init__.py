"""A tiny calculator package, bundled as Tao's demo repository."""

from calc.ops import add, average, subtract

__all__ = ["add", "average", "subtract"]
