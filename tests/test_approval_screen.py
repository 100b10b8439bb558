"""The approval modal on its own, through Textual's pilot: what approves, what denies, and the guard."""

from __future__ import annotations

import pytest
from textual.app import App
from textual.widgets import Input

from harness.approval import Answer
from tests.test_tui_support import until
from tui.screens.approve import WAITING, ApprovalScreen


class Host(App[None]):
    """An app that opens one approval modal and keeps its answer."""

    def __init__(self, guard: float = 0.0) -> None:
        super().__init__()
        self.guard, self.answers = guard, []

    def on_mount(self) -> None:
        self.push_screen(ApprovalScreen("touch a1", self.guard), callback=self.answers.append)


async def ready(host: Host, pilot) -> ApprovalScreen:
    """The modal, once its guard is over."""
    await until(pilot, lambda: isinstance(host.screen, ApprovalScreen) and host.screen.ready, "the armed modal")
    return host.screen


@pytest.mark.parametrize("keys, answer", [(["enter"], Answer("deny")), (["space", "escape"], Answer("deny")),
                                          (["n"], Answer("deny")), (["y"], Answer("once")), (["a"], Answer("always"))])
async def test_only_y_or_a_approves_and_enter_denies(keys: list[str], answer: Answer) -> None:
    host = Host()
    async with host.run_test() as pilot:
        await ready(host, pilot)
        await pilot.press(*keys)
        await until(pilot, lambda: bool(host.answers), "the answer")
    assert host.answers == [answer]


async def test_a_typed_message_is_the_denial_reason() -> None:
    host = Host()
    async with host.run_test() as pilot:
        screen = await ready(host, pilot)
        await pilot.press(*"please keep it", "enter")  # no click first: typing goes into the message
        await until(pilot, lambda: bool(host.answers), "the answer")
        assert not screen.is_current
    assert host.answers == [Answer("deny", "please keep it")]


async def test_keys_during_the_guard_neither_approve_nor_deny() -> None:
    host = Host(guard=3600)  # the guard never ends by itself here; `arm` ends it
    async with host.run_test() as pilot:
        await until(pilot, lambda: isinstance(host.screen, ApprovalScreen), "the modal")
        screen = host.screen
        await pilot.press("a", "y", "enter", "space", "n", "escape")  # typed for the prompt as the modal opened
        await pilot.pause()
        assert screen.is_current and host.answers == [] and not screen.ready
        assert str(screen.query_one("#keys").render()) == WAITING  # the choices' keys are not shown yet
        assert not screen.query_one("#choices").display and screen.query_one("#deny-message", Input).value == ""
        screen.arm()
        await pilot.press("y")
        await until(pilot, lambda: bool(host.answers), "the answer")
    assert host.answers == [Answer("once")]


async def test_the_guard_ends_by_itself() -> None:
    host = Host(guard=0.05)
    async with host.run_test() as pilot:
        screen = await ready(host, pilot)
        assert screen.query_one("#choices").display and host.focused is screen.query_one("#deny")
