"""Tao's errors, one short tree. Recoverable tool errors become observations (tools.base.ToolError);
these end a command or a session with a reason recorded in the trajectory.

    TaoError
     ├── UsageError              bad input from the user (exit code 2)
     ├── EngineError             the model could not answer
     │    ├── EngineUnavailable  vllm missing, model not found, server unreachable
     │    ├── EngineDied         the engine failed in the middle of a request
     │    ├── ContextTooLong     the prompt no longer fits the model's context
     │    └── ReplayExhausted    a replayed trajectory has no more recorded turns
     └── SessionStop             control flow out of the loop, caught in Session.run
          ├── Finished           the model called finish; carries its summary
          ├── LimitExceeded      step or wall-time limit reached
          └── Interrupted        the user stopped the current step (the session may go on)
"""

from __future__ import annotations

from harness.vocabulary import Status


class TaoError(Exception):
    """Base of every error Tao raises on purpose."""


class UsageError(TaoError):
    """The user asked for something that cannot work; the message says what to do instead."""


class EngineError(TaoError):
    """The engine could not produce an answer."""


class EngineUnavailable(EngineError):
    """The engine cannot start or be reached."""


class EngineDied(EngineError):
    """The engine failed while a request was running."""


class ContextTooLong(EngineError):
    """The prompt does not fit in the model's context window."""


class ReplayExhausted(EngineError):
    """The replay engine was asked for more turns than the recording holds."""


class SessionStop(TaoError):
    """Ends the session loop; `status` is what session_end records."""

    status: Status = Status.STOPPED


class Finished(SessionStop):
    """The model called finish."""

    status = Status.FINISHED

    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary


class LimitExceeded(SessionStop):
    """A step or wall-time limit was reached."""

    status = Status.LIMIT


class Interrupted(SessionStop):
    """The user interrupted the current step."""

    status = Status.INTERRUPTED
