"""Snapshot tests (pytest-textual-snapshot): the main screens' look, drawn without clocks or durations.

Update the SVGs under tests/__snapshots__ with `pytest tests/test_tui_snapshots.py --snapshot-update`
after a deliberate change of the look, and look at them before committing.
"""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Static

from tests.test_tui_support import TASK, TURNS, event_types, isolated, session_options, until  # noqa: F401
from tui.app import TaoApp
from tui.screens.approve import ApprovalScreen

SIZE = (150, 42)
FIX = [TURNS[0], TURNS[1], TURNS[2], TURNS[-1]]  # grep, read, edit, finish: no approval on the way in auto-edit


def auto_edit(isolated: Path) -> Path:
    """The user's config says mode = "auto-edit", so that FIX's edit runs without a modal; returns `isolated`."""
    config = isolated / "xdg_config_home" / "tao" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[approvals]\nmode = "auto-edit"\n')
    return isolated


async def type_task(pilot: Pilot) -> None:
    await pilot.press(*TASK, "enter")


def test_main_screen_after_a_session_with_speculations(isolated: Path, snap_compare) -> None:
    async def run_before(pilot: Pilot) -> None:
        await type_task(pilot)
        await until(pilot, lambda: "turn_end" in event_types(pilot.app), "the end of the work")
        await pilot.pause()

    assert snap_compare(TaoApp(session_options(auto_edit(isolated), FIX), masked=True), terminal_size=SIZE,
                        run_before=run_before)


def test_approval_modal(isolated: Path, snap_compare) -> None:
    async def run_before(pilot: Pilot) -> None:
        await type_task(pilot)
        await until(pilot, lambda: isinstance(pilot.app.screen, ApprovalScreen) and pilot.app.screen.ready,
                    "the approval modal, past its guard")
        await pilot.pause()

    turns = [TURNS[0], TURNS[4], TURNS[-1]]  # grep, then `touch NOTES`; speculations would still be running
    options = session_options(isolated, turns, "--no-speculation")
    assert snap_compare(TaoApp(options, masked=True), terminal_size=SIZE,
                        run_before=run_before)


def test_keys_screen(isolated: Path, snap_compare) -> None:
    assert snap_compare(TaoApp(session_options(isolated, FIX), masked=True), terminal_size=SIZE, press=["?"])


def test_workspace_diff_screen(isolated: Path, snap_compare) -> None:
    async def run_before(pilot: Pilot) -> None:
        await type_task(pilot)
        await until(pilot, lambda: "turn_end" in event_types(pilot.app), "the end of the work")
        await pilot.press("ctrl+g")
        await until(pilot, lambda: "reading" not in str(pilot.app.screen.query_one("#diff", Static).render()),
                    "the diff")

    assert snap_compare(TaoApp(session_options(auto_edit(isolated), FIX), masked=True), terminal_size=SIZE,
                        run_before=run_before)
