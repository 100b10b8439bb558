"""Launches of calls the model has already written out while its answer goes on; not guesses.

    scheduler.start_streamed(call, step)        # a call of a turn of several: it starts as soon as it is written
    scheduler.chain(call, step, before, follow)  # `call` a file edit: the call predicted after it starts in an
                                                 # overlay that holds the edit (the rule is in running/chain.py)

The scheduler's two methods of those names come here; the scheduler admits, starts, serves and discards
these speculations as it does every other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.protocol import ParsedCall
from harness.speculation.prediction.patterns import Candidate
from harness.speculation.running import chain as chains
from harness.speculation.running.promotion import exact_call, validated
from harness.vocabulary import DiscardReason, Moment
from tools.base import Effect

if TYPE_CHECKING:
    from harness.speculation.running.records import Speculation
    from harness.speculation.running.scheduler import SpeculationScheduler

STREAMED = "streamed"
"""The kind of a speculation that is a call the model has already written (`start_streamed`), not a guess."""


def start_streamed(scheduler: SpeculationScheduler, call: ParsedCall, step: int) -> Speculation | None:
    """Start a call the model has written out in full while its answer goes on (a turn of several calls):
    it is not a guess, so no utility is asked of it; a sandboxed one still needs an overlay place."""
    scheduler.step = step
    tool = scheduler.tools.get(call.name)
    if tool is None or tool.effect is Effect.MUTATING or call.name == "finish" or scheduler.edit_streamed:
        return None  # after an edit in the same answer it would run at a version the edit ends
    args = validated(tool, call.arguments)
    key = scheduler.key_of(call.name, args) if args is not None else None
    if args is None or key is None or key in scheduler.specs:
        return None  # refused by its schema (it runs for real, for the tool's error), or already running
    version = scheduler.workspace.refresh()
    exact = exact_call(call.name, args)
    if scheduler.repeat(exact, version) is not None:
        return None
    if tool.effect is Effect.SANDBOXED and not scheduler.overlay_free():
        return None
    candidate = Candidate(call.name, args, key, STREAMED, tool.effect.value, 1.0, 0.0, 0.0, 0.0,
                          "streamed: written out in full, the answer still going on")
    return scheduler.start(candidate, Moment.C, version)


def chain(scheduler: SpeculationScheduler, call: ParsedCall, step: int, before: list[ParsedCall],
          follow: bool = True) -> Speculation | None:
    """The model has streamed `call` in full, after the calls `before` in the same answer. If it is a file
    edit (and those only read) and `follow` (nobody has to approve it first), apply it in an overlay and start
    there the call predicted to follow it (running/chain.py: when its result is served). Speculations no call
    before it can use are discarded."""
    tool = scheduler.tools.get(call.name)
    args = validated(tool, call.arguments) if tool is not None else None
    if tool is None or args is None or tool.effect is not Effect.MUTATING:
        return None
    scheduler.step = step
    version = scheduler.workspace.refresh()
    scheduler.drop_stale(version)
    earlier = [scheduler.exact_of(c) for c in before]
    for spec in list(scheduler.specs.values()):
        if spec.exact not in earlier:  # the edit will have changed the tree before any later call
            scheduler.discard(spec, DiscardReason.EDIT_FIRST, name=call.name)
    scheduler.edit_streamed = True
    if not follow or scheduler.unconfined is not None or any(scheduler.effect_of(c.name) is not Effect.PURE
                                                             for c in before):
        return None  # an earlier call may change the tree first: the edit would apply to another version
    edit = chains.plan(tool, args, exact_call(call.name, args), scheduler.workspace)
    if edit is None:
        return None
    for candidate in chains.followers(scheduler.analyzer, call, edit, version, step, scheduler.tools,
                                      scheduler.budget.k):
        if scheduler.admit(candidate, version):
            return scheduler.start(candidate, Moment.A, version, edit)
    return None
