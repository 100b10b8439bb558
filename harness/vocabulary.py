"""The harness's shared words, each declared once: how a session ended, a speculation's lifecycle, the
moments a call is predicted at, why a speculation is thrown away, a session's class on `tao serve`, and the
header by which a client knows it talks to `tao serve`.
(A tool's effect class is the tools' own word: `tools.Effect`.)

String enums where the word is written to events, so trajectories keep their bytes; `text` is what
people read (the TUI, the logs, the `spec_discard` reason).
"""

from __future__ import annotations

import enum


class Status(enum.StrEnum):
    """How a session (or one piece of its work) ended, as `session_end.status` and `turn_end.status` record it."""

    FINISHED = "finished"  # the model called finish
    ERROR = "error"  # the engine failed (or never started)
    LIMIT = "limit"  # the step or wall-time limit was reached
    INTERRUPTED = "interrupted"  # the user stopped it
    STOPPED = "stopped"  # a SessionStop with no status of its own (never raised as such)
    KILLED = "killed"  # never recorded: a saved session whose last event is not a session_end (tao died)

    @property
    def exit_code(self) -> int:
        """The exit code of `tao run` for a session that ended so."""
        return EXIT_CODES.get(self, 1)


# The exit code of `tao run` by status (docs/EVENTS.md); any other status exits 1.
EXIT_CODES: dict[str, int] = {Status.FINISHED: 0, Status.ERROR: 1, Status.LIMIT: 3, Status.INTERRUPTED: 130}


class SpecState(enum.IntEnum):
    """A speculation's lifecycle, in order; `>= PROMOTED` means it is over."""

    RUNNING = 0
    READY = 1
    PROMOTED = 2
    DISCARDED = 3
    TAINTED = 4  # discarded, and its run may have seen another world than a real run would

    @property
    def text(self) -> str:
        """The state as the speculation pane names it."""
        return self.name.lower()


class Moment(enum.StrEnum):
    """When in a step a call is predicted (`spec_launch.moment`); later moments know more of the answer."""

    A = "a"
    B = "b"
    C = "c"

    @property
    def text(self) -> str:
        """What is known at this moment, for people."""
        return _MOMENT_TEXT[self]


_MOMENT_TEXT = {Moment.A: "after the last observation", Moment.B: "the reasoning has streamed",
                Moment.C: "the call's name is known"}


class DiscardReason(enum.Enum):
    """Why a speculation was thrown away. `text(...)` is the `spec_discard.reason` people read."""

    NOT_CALLED = "not the model's call"
    FAILED = "its run failed or went stale"
    ERROR_OR_TIMEOUT = "its run ended in an error or a timeout; the real call runs for itself"
    TAINTED = "tainted: {detail}"  # its run may have seen another world: `detail` says how
    UNPROMOTABLE = "its changes cannot be promoted: {detail}"
    UNMATCHED = "the call could not be matched ({detail})"  # a bug in Tao; the call runs for real
    STALE = "the workspace changed (version {was} -> {now})"
    OTHER_TOOL = "the model is calling {name}"
    SESSION_ENDED = "the session ended"
    TURNED_OFF = "speculation turned off"
    BROKEN = "speculation failed ({detail})"
    EDIT_FIRST = "the model's {name} call changes the workspace before any later call"
    EDIT_FAILED = "the {name} call it ran after failed for real: {detail}"  # a chain (running/chain.py)
    EDIT_DIFFERED = "the {name} call it ran after did not land as applied ({detail})"
    MODEL_STOPPED = "the model stopped"
    INTERRUPTED = "interrupted by the user"

    def text(self, **details: object) -> str:
        """The reason with its details filled in, cut where a detail may be long."""
        return self.value.format(**details)[:_CUT.get(self)]

    def detail(self, text: str) -> str:
        """What a recorded reason of this kind says after its fixed words (a tainted run's taints)."""
        return text.removeprefix(self.value.partition("{")[0])


_CUT = {DiscardReason.TAINTED: 500, DiscardReason.UNPROMOTABLE: 300, DiscardReason.UNMATCHED: 300,
        DiscardReason.EDIT_FAILED: 300, DiscardReason.EDIT_DIFFERED: 300}


class Traffic(enum.StrEnum):
    """A session's class as `tao serve` ranks it (header `X-Tao-Class`): a person waits on an interactive
    session's every answer (the TUI, `tao run` on a terminal), on a batch session's only at the end
    (`tao swebench`, `tao run` in CI or a script)."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


# Every response of `tao serve` carries this header with this value: a client that sees it talks to a tao gateway
# (and then says whose each request is and how it ranks).
GATEWAY_HEADER = "X-Tao-Gateway"
GATEWAY_MARK = "1"
