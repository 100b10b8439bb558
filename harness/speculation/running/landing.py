"""The take side of chains: the edit a chain runs after is taken for real, then lands or fails.

    scheduler.landed(call, observation)  # a mutating call ended: its chains go on at the new version, or go

The scheduler calls `taking` as it takes a mutating call, and its method `landed` comes here; the rule
these apply is in running/chain.py, and the launch side of chains in running/written.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.protocol import ParsedCall
from harness.speculation.running import chain
from harness.vocabulary import DiscardReason
from tools.base import Observation

if TYPE_CHECKING:
    from harness.speculation.running.scheduler import SpeculationScheduler


def taking(scheduler: SpeculationScheduler, call: ParsedCall, exact: str, version: int) -> None:
    """A mutating call is about to run for real (stale speculations are gone): a chain on exactly it waits
    for it to land; any other chain is discarded (it runs after another tree)."""
    for spec in list(scheduler.specs.values()):
        edit = spec.after
        if edit is None or not edit.pending:
            continue
        if edit.exact != exact or spec.version != version:
            scheduler.discard(spec, DiscardReason.EDIT_FIRST, name=call.name)
        else:
            edit.call_id = call.call_id


def landed(scheduler: SpeculationScheduler, call: ParsedCall, observation: Observation) -> None:
    """A mutating call ended (ran, or was refused): a chain on it goes on at the new version if the edit
    succeeded and left the tree as its overlay holds it; else it is discarded."""
    exact = scheduler.exact_of(call)
    for spec in list(scheduler.specs.values()):
        edit = spec.after
        if edit is None or not edit.pending or (edit.call_id != call.call_id and edit.exact != exact):
            continue
        if observation.is_error:
            scheduler.discard(spec, DiscardReason.EDIT_FAILED, name=call.name,
                              detail=observation.text.split("\n", 1)[0])
        elif edit.call_id != call.call_id:  # it ran without being taken: never seen, never served
            scheduler.discard(spec, DiscardReason.EDIT_DIFFERED, name=call.name, detail="not taken")
        elif (why := chain.differs(edit, scheduler.workspace.root)) is not None:  # checked again when served
            scheduler.discard(spec, DiscardReason.EDIT_DIFFERED, name=call.name, detail=why)
        else:
            edit.landed, spec.version = True, scheduler.workspace.version
