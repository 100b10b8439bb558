"""Environment variables set for a while: the names given get back the values (or the absence) they had."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def kept_environment(*names: str) -> Iterator[None]:
    """Whatever the block does to `names` in os.environ is undone when it ends, an unset name unset again."""
    saved = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
