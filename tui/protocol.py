"""Protocol mode for the viewer: the six-step walkthrough, pinned notes, marked phases, export.

``ProtocolApp`` is a base class of the viewer's app (``class GaplensApp(ProtocolApp)``),
so the viewer's module gains one base class and nothing else: the bindings, message
handlers and command-palette entries of the guided reading all live here. It relies
on the app's ``model`` (a TimelineModel, ``None`` while loading) and ``timeline``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen

from gaplens.analysis.phases import Phase
from gaplens.analysis.protocol.notes import Notes, find_event, note_for_event
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.text import clean_text, shorten
from gaplens.store.notes import NotesStore, atomic_write, export_folder
from gaplens.tui.notes_panel import LineInput, NoteAction, NotesPanel
from gaplens.tui.protocol_panel import AnswerCancelled, AnswerSubmitted, ProtocolPanel

# The walk and the report (and the smells, steps and floor behind them) are imported when the user
# first asks for them, not with the app: a warm open would pay ~40 ms for them.
if TYPE_CHECKING:
    from gaplens.analysis.protocol.walk import Walkthrough
    from gaplens.tui.app import ModelReady
    from gaplens.tui.timeline import Timeline
    from gaplens.tui.viewmodel import TimelineModel

#: (key, action, palette title, palette help); P itself is in ``tui.keys.KEYS`` with the viewer's keys.
PROTOCOL_KEYS = (
    ("right_square_bracket", "protocol_step(1)", "Protocol: next step", "]"),
    ("left_square_bracket", "protocol_step(-1)", "Protocol: previous step", "["),
    ("right_curly_bracket", "protocol_scroll(1)", "Protocol: scroll the step's text down", "}"),
    ("left_curly_bracket", "protocol_scroll(-1)", "Protocol: scroll the step's text up", "{"),
    ("e", "write_answer", "Protocol: write your answer for this step", "e"),
    ("b", "pin_note", "Pin a note to the cursor or the selected event", "b"),
    ("B", "toggle_notes", "Notes: list, jump to, edit, delete", "B"),
    ("m", "mark_phase", "Mark a phase (m at start, m at end) or rename the selected one", "m"),
    ("E", "export", "Export the reading: Markdown + SVG screenshot", "E"),
)


_DISPLAY = {
    "right_square_bracket": "]",
    "left_square_bracket": "[",
    "right_curly_bracket": "}",
    "left_curly_bracket": "{",
}


@dataclass
class WalkthroughReady(Message):
    walk: Walkthrough


class ProtocolApp(App[int]):
    """The guided reading, mixed into the viewer app as a base class."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(key, action, title, show=False, key_display=_DISPLAY.get(key))
        for key, action, title, _ in PROTOCOL_KEYS
    ]

    # Set by the viewer app: ``None`` until the loading worker has built the model.
    model: TimelineModel | None

    if TYPE_CHECKING:  # the viewer app's property (raises before a trace is loaded)

        @property
        def timeline(self) -> Timeline: ...

        def show_hint(self, text: str, seconds: float = 10.0) -> None: ...

    protocol_step: int = 0  # 0: protocol mode is off
    walkthrough: Walkthrough | None = None
    notes: Notes | None = None
    notes_store: NotesStore | None = None

    def notify(self, message: str, *args: Any, **kwargs: Any) -> None:
        """A toast, unless the same words are on screen already: a second copy only covers the timeline."""
        if any(n.message == message for n in getattr(self, "_notifications", ())):
            return
        super().notify(message, *args, **kwargs)

    def action_protocol_scroll(self, pages: int) -> None:
        for panel in self.query(ProtocolPanel):
            panel.scroll_facts(pages)

    _mark_start_ns: float | None = None
    _base_phases: list[Phase] | None = None

    # ---- notes follow the trace ------------------------------------------------
    def on_model_ready(self, msg: ModelReady) -> None:
        model = self.model
        if model is None:  # the app's own handler, which runs first, has set it
            return
        if self.notes is None:
            self._open_notes(model)
        if msg.final:
            first = self._base_phases is None
            self._base_phases = list(model.readings.phases)
            self._apply_phases()
            # A hint for people, on its own line (a toast would cover the rows), not for headless runs.
            if first and not self.is_headless and not self.query(ProtocolPanel):
                self.show_hint("New to this trace? P walks the six-step guided reading; ? lists every key.")

    def _open_notes(self, model: TimelineModel) -> None:
        trace = model.trace
        path = trace.meta.path
        notes = self.notes = Notes()
        if not path or not os.path.isfile(path):
            return
        try:
            self.notes_store = NotesStore(path, trace.meta.origin_ns, warn=self._warn)
            notes = self.notes = self.notes_store.load()
        except OSError as exc:
            self._warn(f"notes unavailable: {exc}")
        if not notes.empty:
            self.notify(f"Loaded your notes: {len(notes.notes)} notes, {len(notes.answers)} answers (B lists them)")

    def _warn(self, message: str) -> None:
        self.notify(clean_text(message), severity="warning", timeout=8, markup=False)

    def _save_notes(self) -> None:
        if self.notes_store is None or self.notes is None:
            return
        try:
            self.notes_store.save(self.notes)
        except OSError as exc:
            self.notify(f"Could not save notes: {shorten(exc, 200)}", severity="error", markup=False)

    def _changed_notes(self) -> None:
        self._save_notes()
        if self.walkthrough is not None:
            self.walkthrough.refresh_notes(self.notes)
        if self.notes is None:  # callers have just changed the notes, so they are open
            return
        for panel in self.query(NotesPanel):
            panel.show(self.notes)
        self._apply_phases()  # a save merges what other windows marked too

    # ---- protocol mode ---------------------------------------------------------
    async def action_protocol(self) -> None:
        if self.model is None:
            self.notify("Still loading the trace", severity="warning")
            return
        if self.query(NotesPanel):
            had_protocol = bool(self.query(ProtocolPanel))
            await self.action_toggle_notes()
            if had_protocol:
                return  # P from the notes list goes back to the walkthrough
        panels = self.query(ProtocolPanel)
        if panels:
            await panels.first().remove()
            self.protocol_step = 0
            self._clear_evidence()
            return
        await self.screen.mount(ProtocolPanel(id="protocol"))
        if self.walkthrough is None:
            self.notify("Reading the trace for the walkthrough…", timeout=3)
            self._compute_walkthrough(self.model.trace, self.notes)
        else:
            self._go(self.protocol_step or self._first_open_step())

    @work(thread=True, exclusive=True, group="protocol")
    def _compute_walkthrough(self, trace, notes: Notes | None) -> None:
        from gaplens.analysis.protocol.walk import Walkthrough

        walk = Walkthrough(trace, notes)
        walk.steps()  # every step now, so paging through them never waits
        self.post_message(WalkthroughReady(walk))

    def on_walkthrough_ready(self, msg: WalkthroughReady) -> None:
        self.walkthrough = msg.walk
        if self.query(ProtocolPanel):
            self._go(self.protocol_step or self._first_open_step())

    def _first_open_step(self) -> int:
        """Resume at the first step without an answer."""
        answers = self.notes.answers if self.notes else {}
        return next((n for n in range(1, 7) if n not in answers), 1)

    async def action_protocol_step(self, delta: int) -> None:
        if not self.query(ProtocolPanel):
            await self.action_protocol()
            return
        if self.walkthrough is None:
            return
        target = min(6, max(1, (self.protocol_step or 1) + delta))
        if target == self.protocol_step:
            self.notify("That was the last step: E exports the reading" if delta > 0 else "This is step 1")
            return
        self._go(target)

    def _go(self, n: int) -> None:
        """Show step ``n`` in the panel and move the timeline where the step looks."""
        walk = self.walkthrough
        if walk is None:
            return
        step = walk.step(n)
        self.protocol_step = n
        answer = self.notes.answers.get(n, "") if self.notes else ""
        if n == 6 and not answer and self.notes:
            answer = self.notes.experiment
        self.query_one(ProtocolPanel).show(step, answer)
        tl = self.timeline
        self._clear_evidence()
        if n <= 3:
            tl.phase = None
            tl.select(None)
            tl.action_fit()
            if n == 2:
                self._cursor_to_phases(tl)
            return
        gap = walk.gap
        if gap is None:
            return
        tl.select_gap(gap, frame=True)
        if n == 5 and step.view.select:
            framed = tl.viewport
            ev = np.asarray(step.view.select, dtype=np.int64)
            tl.matches = ev  # all evidence marked in place; n / N walk through it
            tl.match_order = ev[np.argsort(tl.model.trace.start_ns[ev], kind="stable")]
            tl.select_event(focus_evidence(tl.model.trace, ev, gap))
            tl.set_viewport(framed)  # selecting must not move the view off the gap

    def _cursor_to_phases(self, tl) -> None:
        from gaplens.tui.lanetree import RowKind

        row = next((k for k, r in enumerate(tl.rows) if r.kind == RowKind.PHASES), None)
        if row is not None:
            tl.set_row_cursor(row)

    def _clear_evidence(self) -> None:
        if self.model is None:
            return
        tl = self.timeline
        if tl.matches.size:
            tl.matches = np.empty(0, np.int64)
            tl.match_order = np.empty(0, np.int64)
            tl.refresh()

    def action_write_answer(self) -> None:
        panels = self.query(ProtocolPanel)
        if not panels or self.walkthrough is None:
            self.notify("Press P to start the reading protocol first", severity="information")
            return
        panels.first().focus_answer()

    def on_answer_submitted(self, msg: AnswerSubmitted) -> None:
        if self.notes is None:
            return
        self.notes.set_answer(msg.step, msg.text)
        if msg.step == 6:
            self.notes.experiment = self.notes.answers.get(6, "")
        self._changed_notes()
        self.timeline.focus()
        if msg.step not in self.notes.answers:
            self.notify(f"Cleared your answer for step {msg.step}")
        else:
            self.notify(f"Saved your answer for step {msg.step}" + (": ] for the next step" if msg.step < 6 else ""))

    def on_answer_cancelled(self, msg: AnswerCancelled) -> None:
        if self.walkthrough is not None and msg.step:
            self._go(msg.step)  # puts the saved answer back
        self.timeline.focus()

    # ---- notes -----------------------------------------------------------------
    def action_pin_note(self) -> None:
        notes = self.notes
        if self.model is None or notes is None:
            return
        tl = self.timeline
        trace = self.model.trace
        sel = tl.selection
        if sel is not None and sel.event >= 0:
            what = f"Note on {trace.names[int(trace.name_id[sel.event])][:60]}"
        elif sel is not None:
            what = f"Note on {fmt_ns(sel.t0_ns)} – {fmt_ns(sel.t1_ns)}"
        else:
            what = f"Note at {fmt_ns(tl.cursor_ns)}"

        def done(text: str | None) -> None:
            if not text or not text.strip():
                return
            if sel is not None and sel.event >= 0:
                note_for_event(notes, trace, sel.event, text)
            elif sel is not None:
                notes.add_note(text, sel.t0_ns, sel.t1_ns)
            else:
                notes.add_note(text, int(tl.cursor_ns))
            self._changed_notes()
            self.notify("Note pinned (B lists your notes)")

        self.push_screen(LineInput(what, placeholder="what you see here"), done)

    async def action_toggle_notes(self) -> None:
        """The notes list takes the side panel's place while open (B again gives it back)."""
        if self.notes is None:
            return
        panels = self.query(NotesPanel)
        if panels:
            await panels.first().remove()
            for protocol in self.query(ProtocolPanel):
                protocol.display = True
            self.timeline.focus()
            return
        for protocol in self.query(ProtocolPanel):
            protocol.display = False
        panel = NotesPanel(id="notes")
        await self.screen.mount(panel)
        panel.show(self.notes)
        panel.focus_list()

    def on_note_action(self, msg: NoteAction) -> None:
        if msg.action == "leave":
            self.timeline.focus()
            return
        notes = self.notes
        if notes is None:  # the list only opens once the notes are
            return
        try:
            note = notes.note(msg.note_id)
        except KeyError:
            return
        if msg.action == "jump":
            self._jump_to(note)
        elif msg.action == "delete":
            notes.delete_note(note.id)
            self._changed_notes()
            self.notify("Note deleted")
        elif msg.action == "edit":

            def done(text: str | None) -> None:
                if text is not None and text.strip():
                    notes.edit_note(note.id, text)
                    self._changed_notes()

            self.push_screen(LineInput("Edit the note", initial=note.text), done)

    def _jump_to(self, note) -> None:
        if self.model is None:
            return
        tl = self.timeline
        trace = self.model.trace
        if note.event_name:
            i = find_event(trace, note.event_name, note.start_ns)
            if i is not None:
                tl.select_event(i)
                tl.focus()
                return
            self._warn(f"{note.event_name[:40]} is not in this trace any more: jumping to the time")
        end = note.end_ns if note.end_ns is not None and note.end_ns > note.start_ns else None
        tl.set_viewport(
            tl.viewport.show(note.start_ns, end) if end else tl.viewport.reveal(note.start_ns, note.start_ns + 1)
        )
        tl.cursor_ns = note.start_ns
        tl.refresh()
        tl.focus()

    # ---- phases ----------------------------------------------------------------
    def action_mark_phase(self) -> None:
        notes = self.notes
        if self.model is None or notes is None:
            return
        tl = self.timeline
        sel = tl.selection
        if self._mark_start_ns is None and sel is not None and sel.phase is not None:
            self._rename(notes, sel.phase)
            return
        if self._mark_start_ns is None:
            self._mark_start_ns = tl.cursor_ns
            self.notify(f"Phase starts at {fmt_ns(tl.cursor_ns)}: move the cursor to its end and press m again")
            return
        start, end = sorted((int(self._mark_start_ns), int(tl.cursor_ns)))
        self._mark_start_ns = None
        if end <= start:
            self.notify("A phase needs some length: mark its start and its end", severity="warning")
            return

        def done(name: str | None) -> None:
            if name and name.strip():
                notes.mark_phase(name, start, end)
                self._changed_notes()
                self._apply_phases()
                self.notify(f"Marked {clean_text(name).strip()}: {fmt_ns(end - start)}", markup=False)

        self.push_screen(
            LineInput(f"Name the phase {fmt_ns(start)} – {fmt_ns(end)}", placeholder="prefill, decode, tokenize, …"),
            done,
        )

    def _rename(self, notes: Notes, phase: Phase) -> None:
        original = next(
            (p.original for p in notes.phases if p.original and p.name == phase.name and p.start_ns == phase.start_ns),
            phase.name,
        )

        def done(name: str | None) -> None:
            if name and name.strip():
                notes.mark_phase(name, phase.start_ns, phase.end_ns, original=original)
                self._changed_notes()
                self._apply_phases()

        self.push_screen(LineInput(f"Rename the phase {original}", initial=phase.name), done)

    def _apply_phases(self) -> None:
        """Draw the trace's phases with the user's renames, plus the user's marked ranges."""
        if self.model is None or self._base_phases is None or self.notes is None:
            return
        renames = {(p.original, p.start_ns): p.name for p in self.notes.phases if p.original}
        drawn = [
            dataclasses.replace(p, name=renames[(p.name, p.start_ns)]) if (p.name, p.start_ns) in renames else p
            for p in self._base_phases
        ]
        depth = min((p.depth for p in drawn), default=0) - 1  # marked ranges get their own row on top
        drawn += [
            Phase(m.name, m.start_ns, m.end_ns, m.start_ns, m.end_ns, depth, -1)
            for m in self.notes.phases
            if not m.original
        ]
        if [p.name for p in drawn] == [p.name for p in self.model.readings.phases]:
            return
        self.model.set_readings(dataclasses.replace(self.model.readings, phases=drawn))
        self.timeline.set_model(self.model)

    # ---- export ----------------------------------------------------------------
    def action_export(self) -> None:
        if self.model is None:
            return
        trace = self.model.trace
        try:
            md = clean_text(
                self.reading_markdown(), keep_newlines=True
            )  # the file name is in it, and may hold anything
            folder, stem = export_place(trace.meta.path)
            md_path = folder / f"{stem}.gaplens.md"
            atomic_write(md_path, md.encode())
            svg_path = atomic_write(folder / f"{stem}.gaplens.svg", self.export_screenshot().encode())
        except OSError as exc:
            self.notify(f"Export failed: {shorten(exc, 200)}", severity="error", markup=False)
            return
        self.notify(clean_text(f"Exported {md_path} and {svg_path}"), timeout=10, markup=False)

    def reading_markdown(self) -> str:
        """The report with the user's words: the same steps the panel shows, with the report's tables."""
        assert self.model is not None, "no trace loaded yet"
        from gaplens.analysis.protocol.report import report_markdown

        return report_markdown(self.model.trace, notes=self.notes, walk=self.walkthrough)

    # ---- the command palette ---------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for _key, action, title, keys in PROTOCOL_KEYS:
            yield SystemCommand(title, f"keys: {keys}", _runner(self, action))


def focus_evidence(trace, ev: np.ndarray, gap) -> int:
    """The evidence to select first: the host event covering most of the gap, not wider than it."""
    from gaplens.loaders.model import GPU_WORK_KINDS

    s, e = trace.start_ns[ev], trace.end_ns[ev]
    overlap = np.minimum(e, gap.end_ns) - np.maximum(s, gap.start_ns)
    host = ~np.isin(trace.kind[ev], np.asarray([int(k) for k in GPU_WORK_KINDS], dtype=trace.kind.dtype))
    fits = host & (e - s <= 2 * max(gap.dur_ns, 1)) & (overlap > 0)
    if not fits.any():
        return int(ev[0])
    return int(ev[np.flatnonzero(fits)[np.argmax(overlap[fits])]])


def _runner(app: App, action: str):
    return lambda: app.run_action(action)


def export_place(trace_path: str) -> tuple[Path, str]:
    """The state dir's exports folder (beside the trace only when asked: ``notes.export_folder``); the file stem."""
    p = Path(trace_path) if trace_path else Path("trace")
    return export_folder(trace_path), p.name or "trace"
