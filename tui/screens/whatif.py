"""``W``: what-if in the viewer. Pick a change, read the predicted step beside the measured one, step by step.

    What if · decode_step ×8 · enter on a step: its timeline
    --graph step · the lever (launch)  ▼   type --remove X · --graph PHASE · --scale GLOB=F
    GPU window                    111.4 ms →  9.52 ms   -91.5%
    decode_step (median of 7)     13.74 ms →  1.08 ms   -92.1%
    • --graph step: the 8 instances of decode_step … (the change's words and notes, wrapped)
    step                 measured  predicted   change
    decode_step 3        14.20 ms    1.14 ms   -92.0%  warm-up

The numbers are ``analysis.whatif.whatif``'s, the function ``gaplens whatif`` prints, in the CLI's
words (``tui.commands.whatif``). The choices are the levers' changes first
(``analysis.lever_changes.changes_for``, the experiment's own preselected), then each ``--remove``
cause and ``--graph step``; any change can be typed as on the command line. Predictions run in a
worker (a 1M-event trace takes about a second); enter on a step shows its span on the timeline.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Select, Static
from textual.worker import get_current_worker

from gaplens.analysis.units import fmt_ns
from gaplens.analysis.whatif import REMOVABLE, Change, parse_graph, parse_remove, parse_scale
from gaplens.loaders.model import Trace
from gaplens.loaders.text import clean_text, shorten
from gaplens.tui.commands.whatif import change_line, pct_change
from gaplens.tui.screens.tables import cell, fill

#: The cause groups whose lever a what-if change models, in the order the list offers them
#: after the experiment's own (``analysis.lever_changes``'s table).
LEVER_GROUPS = ("launch", "host", "sync", "alloc", "copy")
#: A refusal or a typo is said on one line this long at most (the notes box has room for the rest).
ERROR_CHARS = 300

HELP = "type a change: --remove CAUSE · --graph PHASE · --scale GLOB=F"


@dataclass(frozen=True)
class Choice:
    """One entry of the change list: the changes it makes together and how the list names it."""

    changes: tuple[Change, ...]
    why: str = ""  # "the lever (launch)" for the experiment's own, "lever: copy" for the others

    @property
    def command(self) -> str:
        return " ".join(c.text() for c in self.changes)

    @property
    def label(self) -> str:
        return clean_text(f"{self.command} · {self.why}" if self.why else self.command)


@dataclass(frozen=True)
class StepPick:
    """What enter on a step hands the timeline: the step's name, its host range and its span as CUDA events time it."""

    name: str
    host_ns: tuple[int, int]
    span_ns: tuple[int, int]


def choices(trace: Trace) -> tuple[list[Choice], int | None, str]:
    """The change list: the experiment's lever first, the other levers', each ``--remove`` cause, ``--graph step``.

    Returns (choices, the one to preselect or None, why there is none: the experiment's lever is
    not a change what-if models, e.g. a device-paced trace).
    """
    from gaplens.analysis.lever_changes import changes_for
    from gaplens.analysis.protocol.experiment import experiment

    group = experiment(trace).group
    out: list[Choice] = []
    seen: set[tuple[Change, ...]] = set()

    def add(changes: list[Change] | tuple[Change, ...], why: str = "") -> None:
        key = tuple(changes)
        if key and key not in seen:
            seen.add(key)
            out.append(Choice(key, why))

    lever, why_not = changes_for(trace, group)
    add(lever, f"the proposed lever ({group})")
    if lever and lever[0].kind == "scale":  # pageable copies: pinned, and pinned and prefetched (``quotes``)
        add([*lever, Change("remove", "copy")], f"the proposed lever ({group}), prefetched too")
    for g in LEVER_GROUPS:
        if g != group:
            add(changes_for(trace, g)[0], f"lever: {g}")
    for cause in REMOVABLE:
        add([Change("remove", cause)])
    add([Change("graph", "step")])
    return out, (0 if lever else None), why_not


def parse_typed(text: str) -> list[Change]:
    """Changes typed as on the command line (``--remove host --scale '*gemm*=0.5'``); ValueError says what is wrong."""
    words = shlex.split(text)  # an unbalanced quote is a ValueError too
    if not words:
        raise ValueError(HELP)
    parsers = {"remove": parse_remove, "graph": parse_graph, "scale": parse_scale}
    out: list[Change] = []
    k = 0
    while k < len(words):
        flag, eq, value = words[k].lstrip("-").partition("=")
        if flag not in parsers:
            raise ValueError(f"{words[k]!r}: {HELP}")
        if not eq:
            k += 1
            if k == len(words):
                raise ValueError(f"--{flag} wants a value: {HELP}")
            value = words[k]
        out.append(parsers[flag](value))
        k += 1
    return out


def summary_text(r: dict) -> Text:
    """The window and the median step, measured → predicted, as ``gaplens whatif`` prints them."""
    w, st = r["window_ns"], r["steps"]
    rows = [("GPU window", w["measured"], w["predicted"])]
    if st["count"]:
        steady = sum(not s["warmup"] for s in r["per_step"]) or st["count"]
        rows.append((f"{st['label']} (median of {steady})", st["measured_median_ns"], st["predicted_median_ns"]))
    out = Text(no_wrap=True, overflow="ellipsis")
    for k, (label, m, p) in enumerate(rows):
        if k:
            out.append("\n")
        out.append(f"{clean_text(label)[:30]:<30} {fmt_ns(m):>10} → ")
        out.append(f"{fmt_ns(p):>10}", style="bold")
        out.append(f"  {pct_change(m, p)}")
    if not st["count"]:
        out.append("\nno steps in this trace: the window alone is predicted")
    return out


def notes_text(r: dict) -> Text:
    """What each change did and what it assumed, wrapped: the CLI's ``change`` and ``note`` lines."""
    lines = [change_line(d) for d in r["changes"]] + list(r["notes"])
    return Text("\n".join("• " + clean_text(ln) for ln in lines) or "• no change: the replay reproduces the trace")


@dataclass
class ChoicesReady(Message):
    choices: list[Choice]
    default: int | None
    why_not: str
    picks: list[StepPick]


@dataclass
class Predicted(Message):
    changes: tuple[Change, ...]
    result: dict | None
    error: str = ""


class WhatIfScreen(Screen[StepPick | None]):
    """Predicted step times for a chosen change; dismisses with the step to show (or None)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "close"),
        Binding("c", "choose", "choose a change"),
        Binding("e", "type", "type a change"),
        Binding("n", "notes", "all notes"),
    ]
    DEFAULT_CSS = """
    WhatIfScreen #whatif-title { height: 1; padding: 0 1; background: $primary-background; color: $foreground;
        text-wrap: nowrap; text-overflow: ellipsis; }
    WhatIfScreen #whatif-choose { height: 1; margin: 0 0 0 1; }
    WhatIfScreen #whatif-change { width: 46; }
    WhatIfScreen #whatif-input { width: 1fr; margin: 0 0 0 1; }
    WhatIfScreen #whatif-status { height: 1; padding: 0 1; color: $text-muted; }
    WhatIfScreen #whatif-status.-error { color: $text-error; }
    WhatIfScreen #whatif-summary { height: 2; padding: 0 1; }
    WhatIfScreen #whatif-notes-box { height: auto; max-height: 4; padding: 0 1; color: $text-muted; }
    WhatIfScreen #whatif-notes-box.-all { max-height: 100%; }
    WhatIfScreen #whatif-table { height: 1fr; min-height: 5; }
    """

    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self.trace = trace
        self.choices: list[Choice] = []
        self.picks: list[StepPick] = []
        self.asked: tuple[Change, ...] | None = None  # the changes whose prediction is (or will be) shown
        self.results: dict[tuple[Change, ...], Predicted] = {}  # switching back is instant
        self.shown: dict | None = None  # the whatif() object on screen
        self.shown_changes: tuple[Change, ...] | None = None  # the changes it is for

    def compose(self) -> ComposeResult:
        yield Static(Text("What if · reading the lever…"), id="whatif-title")
        with Horizontal(id="whatif-choose"):
            yield Static(Text("reading the lever…"), id="whatif-change")  # the list, once the lever is known
            yield Input(placeholder=HELP, id="whatif-input", compact=True)
        yield Static(Text(""), id="whatif-status")
        yield Static(Text(""), id="whatif-summary")
        with VerticalScroll(id="whatif-notes-box", can_focus=False):
            yield Static(Text(""), id="whatif-notes")
        yield DataTable(id="whatif-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label, width in (
            ("step", "step", 24),
            ("measured", "measured", 10),
            ("predicted", "predicted", 10),
            ("change", "change", 8),
            ("warmup", "", 7),
        ):
            table.add_column(label, key=key, width=width)
        table.focus()
        self._status("reading the experiment's lever…")
        self._load_choices()

    # ---- workers: they post messages, never touch widgets ------------------------
    @work(thread=True, exclusive=True, group="whatif-choices")
    def _load_choices(self) -> None:
        from gaplens.analysis.steps import steps

        try:
            found, default, why = choices(self.trace)
            st = steps(self.trace)
            picks = [
                StepPick(nm, (int(h0), int(h1)), (int(s0), int(s1)))
                for nm, (h0, h1), (s0, s1) in zip(st.names, st.host_spans, st.spans, strict=True)
            ]
        except Exception as exc:  # said on the status line, never raised through the UI
            found, default, why, picks = self._fallback(), None, _internal(exc), []
        self.post_message(ChoicesReady(found, default, why, picks))

    def _fallback(self) -> list[Choice]:
        return [Choice((Change("remove", c),)) for c in REMOVABLE] + [Choice((Change("graph", "step"),))]

    @work(thread=True, exclusive=True, group="whatif-predict")
    def _predict(self, changes: tuple[Change, ...]) -> None:
        from gaplens.analysis.whatif import whatif

        worker = get_current_worker()
        try:
            msg = Predicted(changes, whatif(self.trace, list(changes)))
        except ValueError as exc:  # a change the trace refuses (--graph of a phase that synchronises)
            msg = Predicted(changes, None, f"{_command(changes)} refused: {clean_text(exc)}")
        except Exception as exc:
            msg = Predicted(changes, None, _internal(exc))
        if not worker.is_cancelled:
            self.post_message(msg)

    # ---- messages ------------------------------------------------------------------
    async def on_choices_ready(self, msg: ChoicesReady) -> None:
        self.choices, self.picks = msg.choices, msg.picks
        wait = self.query_one("#whatif-change")
        select = Select[int](
            self._options(),
            prompt="choose a change",
            allow_blank=msg.default is None,
            value=Select.NULL if msg.default is None else msg.default,
            id="whatif-change",
            compact=True,
        )
        await wait.remove()
        with select.prevent(Select.Changed):
            await self.query_one("#whatif-choose", Horizontal).mount(select, before=0)
        if msg.default is not None:
            self._choose(self.choices[msg.default].changes)
        else:
            self._status(f"no change models the proposed lever: {msg.why_not}" if msg.why_not else "choose a change")

    def on_predicted(self, msg: Predicted) -> None:
        self.results[msg.changes] = msg
        if msg.changes == self.asked:
            self._show(msg)

    def on_select_changed(self, event: Select.Changed) -> None:
        if isinstance(event.value, int) and 0 <= event.value < len(self.choices):
            self._choose(self.choices[event.value].changes)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            changes = tuple(parse_typed(event.value))
        except ValueError as exc:  # stay open and usable: say what is wrong on one line
            self._status(shorten(exc, ERROR_CHARS), error=True)
            return
        if changes not in {c.changes for c in self.choices}:
            self.choices.append(Choice(changes, "typed"))
            self._set_options()
        self._choose(changes)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is None:
            return
        k = int(event.row_key.value)
        if k < len(self.picks):
            self.dismiss(self.picks[k])

    # ---- drawing ---------------------------------------------------------------------
    def _options(self) -> list[tuple[Text, int]]:
        return [(Text(c.label, no_wrap=True, overflow="ellipsis"), k) for k, c in enumerate(self.choices)]

    def _select(self) -> Select[int] | None:
        """The change list (None until the lever is known)."""
        found = self.query(Select)
        return found.first() if found else None

    def _set_options(self) -> None:
        select = self._select()
        if select is not None:
            with select.prevent(Select.Changed):
                select.set_options(self._options())

    def _choose(self, changes: tuple[Change, ...]) -> None:
        """Show the prediction for ``changes`` (from the cache, else from a worker) and select it in the list."""
        k = next((k for k, c in enumerate(self.choices) if c.changes == changes), None)
        select = self._select()
        if select is not None and k is not None and select.value != k:
            with select.prevent(Select.Changed):
                select.value = k
        if changes == self.asked:
            return
        self.asked = changes
        done = self.results.get(changes)
        if done is not None:
            self._show(done)
            return
        self._status(f"predicting {_command(changes)}…")
        self._predict(changes)

    def _show(self, msg: Predicted) -> None:
        summary = self.query_one("#whatif-summary", Static)
        notes = self.query_one("#whatif-notes", Static)
        table = self.query_one(DataTable)
        r = msg.result
        if r is None:
            self.shown, self.shown_changes = None, None
            self._status(shorten(msg.error, ERROR_CHARS), error=True)
            summary.update(Text(""))
            notes.update(Text("• " + clean_text(msg.error)))
            fill(table, [])
            return
        self.shown, self.shown_changes = r, msg.changes
        st = r["steps"]
        count = f" · {clean_text(st['label'])} ×{st['count']}" if st["count"] else ""
        self.query_one("#whatif-title", Static).update(
            Text(f"What if{count} · enter on a step: its timeline", no_wrap=True, overflow="ellipsis")
        )
        name = os.path.basename(self.trace.meta.path or "TRACE")
        self._status(f"as the command line: gaplens whatif {shlex.quote(name)} {_command(msg.changes)}")
        summary.update(summary_text(r))
        notes.update(notes_text(r))
        self.query_one("#whatif-notes-box", VerticalScroll).scroll_home(animate=False)
        rows = [
            (
                str(k),
                [
                    cell(clean_text(s["name"])),
                    cell(fmt_ns(s["measured_ns"]), right=True),
                    cell(fmt_ns(s["predicted_ns"]), right=True),
                    cell(pct_change(s["measured_ns"], s["predicted_ns"]), right=True),
                    cell("warm-up" if s["warmup"] else ""),
                ],
            )
            for k, s in enumerate(r["per_step"])
        ]
        fill(table, rows, keep_cursor=True)

    def _status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#whatif-status", Static)
        status.update(Text(clean_text(text), no_wrap=True, overflow="ellipsis"))
        status.set_class(error, "-error")

    # ---- actions -------------------------------------------------------------------------
    def action_choose(self) -> None:
        select = self._select()
        if select is None:
            return
        select.focus()
        select.expanded = True

    def action_type(self) -> None:
        self.query_one(Input).focus()

    def action_notes(self) -> None:
        """The notes take four lines (the steps keep the screen); ``n`` shows them all, and again fewer."""
        self.query_one("#whatif-notes-box", VerticalScroll).toggle_class("-all")

    def action_close(self) -> None:
        self.dismiss(None)


def _command(changes: tuple[Change, ...]) -> str:
    return " ".join(c.text() for c in changes)


def _internal(exc: Exception) -> str:
    return f"internal error: {type(exc).__name__}: {shorten(exc, 200)}"
