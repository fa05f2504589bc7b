"""The job viewer: a rank overview, and each rank's full timeline one key away.

``JobApp`` shows one character-bar row per rank (``tui.jobbars``) on the job's aligned clock,
rows sorted by the waiting each rank imposed (the straggler first, marked ▶), and says where
to start. ``enter`` opens the rank under the cursor in ``RankApp``, the single-trace viewer,
at the straggling moment. The keys of ``tui.keys`` marked "Job" step between ranks and back:
each app ends with what to open next and ``run_job_viewer`` opens it, so the single-trace
viewer stays exactly the one ``gaplens TRACE`` runs.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import ClassVar

import numpy as np
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Footer, Static

from gaplens.analysis.job.reading import JobReading
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import Kind, clean_name
from gaplens.tui import jobbars
from gaplens.tui.app import GaplensApp
from gaplens.tui.commands.ranks import offsets_text
from gaplens.tui.keys import KEYS
from gaplens.tui.viewport import Viewport

#: What an app of the job viewer ends with: ("open", row), ("job", row), or None to quit.
Next = tuple[str, int] | None
JOB_ACTIONS = ("app.next_rank", "app.prev_rank", "app.straggler", "app.job")
GUTTER = 34


_SHORT = {"app.next_rank": "next rank", "app.prev_rank": "prev rank", "app.straggler": "straggler"}


def job_bindings() -> list[BindingType]:
    """The "Job" rows of the one key table, for the overview (the footer shows short labels)."""
    return [
        Binding(k, a.removeprefix("app."), _SHORT.get(a, d), show=a in _SHORT)
        for k, a, d, _ in KEYS
        if a in JOB_ACTIONS
    ]


def neighbour(job: JobReading, row: int, step: int) -> int:
    """The row of the rank numbered ``step`` away from ``row``'s rank (wrapping): the rows are in rank order
    (``analysis.job.align.number_ranks``), so it is the row ``step`` away, at any number of ranks."""
    return (row + step) % len(job.matched.ranks)


def start_here(job: JobReading) -> str:
    """One line: where the guided reading of a job starts."""
    s = job.straggler
    if s is None:
        return "No straggler: the ranks arrive together. enter opens a rank's timeline."
    why = s.evidence[2] if len(s.evidence) > 2 else s.cause
    return (
        f"Start here: rank {s.rank} is the straggler ({s.cause}), imposing {fmt_ns(s.wait_imposed_per_step_ns)} "
        f"of waiting per step — {why}. enter opens it at the straggling moment."
    )


#: Rank offsets the job header lists one by one; more are summarised (count and range), so a multi-host job
#: of thousands of ranks keeps its overview on screen (at 1,024 such ranks the header took 123 lines).
HEADER_OFFSETS = 8


class JobOverview(ScrollView, can_focus=True):
    """One row per rank: a gutter with its numbers, then its bar on the job's clock."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "job--compute",
        "job--comm",
        "job--wait",
        "job--gutter",
        "job--cursor",
        "job--straggler",
    }
    DEFAULT_CSS = """
    JobOverview { height: 1fr; overflow-x: hidden; overflow-y: auto; scrollbar-size-vertical: 1; }
    JobOverview > .job--compute { color: #5fd787; }
    JobOverview > .job--comm { color: #5fafd7; }
    JobOverview > .job--wait { color: #ff5f5f; }
    JobOverview > .job--gutter { color: $text; }
    JobOverview > .job--cursor { background: $primary 40%; text-style: bold; }
    JobOverview > .job--straggler { color: #ff5f5f; text-style: bold; }
    """

    # The cursor keys move the cursor: the scroll view's own bindings of these keys would scroll the list and
    # leave the cursor behind once there are more ranks than lines (and they win over the app's, being focused).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Previous row", show=False),
        Binding("down,j", "move(1)", "Next row", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1000000000)", "First row", show=False),
        Binding("end", "move(1000000000)", "Last row", show=False),
    ]

    def __init__(self, job: JobReading, cursor: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.order = [r.row for r in job.rows]  # display order: most waiting imposed first
        # Row -> display position and row -> table row, once: a frame and a key look rows up, never scan them.
        self._at = {row: i for i, row in enumerate(self.order)}
        self._by_row = {r.row: r for r in job.rows}
        self.cursor = self._at.get(cursor, 0)
        self.window = jobbars.job_window(job)
        self._rows: dict[tuple[int, int], np.ndarray] = {}

    @property
    def row(self) -> int:
        """The job row (``matched.readings`` index) under the cursor."""
        return self.order[self.cursor]

    @property
    def cols(self) -> int:
        return max(self.scrollable_content_region.width - GUTTER, 1)

    def edges(self) -> np.ndarray:
        return jobbars.edges(*self.window, self.cols)

    def on_resize(self, event: events.Resize) -> None:
        self._rows.clear()
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.order))
        self.refresh()

    def move_to(self, row: int) -> None:
        self.cursor = self._at[row]
        self.scroll_to_region(self._region(self.cursor), animate=False)
        self.refresh()

    def action_move(self, step: int) -> None:
        self.move_to(self.order[max(0, min(len(self.order) - 1, self.cursor + step))])

    def action_page(self, pages: int) -> None:
        self.action_move(pages * max(self.scrollable_content_region.height, 1))

    def _region(self, i: int):
        from textual.geometry import Region

        return Region(0, i, 1, 1)

    def label_of(self, row: int) -> str:
        r = self._by_row[row]
        s = self.job.straggler
        mark = "▶" if s is not None and s.row == row else " "
        return f"{mark}{r.rank:>5} {r.reading.busy_pct:>4.0f}% {fmt_ns(r.wait_ns):>9} {fmt_ns(r.imposed_ns):>9} │"

    def classes_of(self, row: int) -> np.ndarray:
        key = (row, self.cols)
        hit = self._rows.get(key)
        if hit is None:
            hit = self._rows[key] = jobbars.row_classes(self.job, row, self.edges())
        return hit

    def render_line(self, y: int) -> Strip:
        i = self.scroll_offset.y + y
        width = self.scrollable_content_region.width
        if i >= len(self.order):
            return Strip.blank(width, self.rich_style)
        row = self.order[i]
        cursor = i == self.cursor
        s = self.job.straggler
        base = self.get_component_rich_style("job--gutter")
        if s is not None and s.row == row:
            base = base + self.get_component_rich_style("job--straggler")
        if cursor:
            base = base + self.get_component_rich_style("job--cursor")
        segs = [Segment(self.label_of(row)[:GUTTER].ljust(GUTTER), base)]
        classes = self.classes_of(row)
        styles = [
            RichStyle(),
            self.get_component_rich_style("job--compute"),
            self.get_component_rich_style("job--comm"),
            self.get_component_rich_style("job--wait"),
        ]
        run_start = 0
        for k in range(1, classes.size + 1):
            if k == classes.size or classes[k] != classes[run_start]:
                c = int(classes[run_start])
                segs.append(Segment(jobbars.GLYPHS[c] * (k - run_start), styles[c]))
                run_start = k
        return Strip(segs).crop(0, width).extend_cell_length(width, self.rich_style)


class JobApp(App[Next]):
    """The rank overview of a job."""

    TITLE = "gaplens"
    CSS = """
    #job-header { height: auto; background: $primary-background; padding: 0 1; }
    #job-start { height: auto; padding: 0 1; color: $warning; }
    #job-columns, #job-marks { height: 1; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit_job", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("enter", "open", "open rank"),
        *job_bindings(),
    ]

    def __init__(self, job: JobReading, cursor: int | None = None) -> None:
        super().__init__()
        self.job = job
        s = job.straggler
        # The glyphs tell compute, communication and waiting apart without colour (NO_COLOR).
        self.start_row = cursor if cursor is not None else (s.row if s is not None else job.rows[0].row)

    def compose(self) -> ComposeResult:
        job = self.job
        fmts = ", ".join(sorted({r.reading.format for r in job.rows}))
        applied = {r.rank: r.offset_ns for r in job.rows if r.offset_ns}
        clocks = offsets_text(applied, HEADER_OFFSETS) if applied else "shared"
        head = (
            f"gaplens · job · {len(job.rows)} ranks ({fmts}) · {job.collectives} collectives matched · "
            f"step {fmt_ns(job.step_ns)} · clock offsets: {clocks}"
        )
        self.overview = JobOverview(job, self.start_row, id="job-overview")
        yield Static(Text(head), id="job-header")
        yield Static(Text(start_here(job)), id="job-start")
        yield Static(
            Text(f"{' rank':<6} {'busy':>5} {'waited':>9} {'imposed':>9} │ █ compute  ▒ communication  ░ waiting"),
            id="job-columns",
        )
        yield Static(id="job-marks")
        yield self.overview
        yield Footer()

    def on_mount(self) -> None:
        self.overview.focus()
        self.call_after_refresh(self._draw_marks)
        if self.job.notes:
            for note in self.job.notes[:5]:
                self.notify(clean_name(note), severity="warning", timeout=10, markup=False)

    def on_resize(self) -> None:
        self.call_after_refresh(self._draw_marks)

    def _draw_marks(self) -> None:
        ov = self.overview
        if ov.scrollable_content_region.width <= GUTTER:
            return
        t0, t1 = ov.window
        label = f" {fmt_ns(0)} … {fmt_ns(t1 - t0)}"
        self.query_one("#job-marks", Static).update(
            Text(label[:GUTTER].ljust(GUTTER) + jobbars.marks(self.job, ov.edges()))
        )
        ov.move_to(ov.row)

    # ---- actions (the cursor keys are the overview's own) ----------------------------
    def action_next_rank(self) -> None:
        self.overview.move_to(neighbour(self.job, self.overview.row, 1))

    def action_prev_rank(self) -> None:
        self.overview.move_to(neighbour(self.job, self.overview.row, -1))

    def action_straggler(self) -> None:
        if self.job.straggler is None:
            self.notify("No straggler in this job: the ranks arrive together")
            return
        self.overview.move_to(self.job.straggler.row)

    def action_job(self) -> None:
        """Already on the overview."""

    def action_open(self) -> None:
        self.exit(("open", self.overview.row))

    def action_help(self) -> None:
        from gaplens.tui.screens.help import HelpScreen

        self.push_screen(HelpScreen())

    def action_quit_job(self) -> None:
        self.exit(None)


class RankApp(GaplensApp):
    """The single-trace viewer on one rank of a job, opened at the straggling moment."""

    # Textual resolves a relative CSS_PATH against the subclass's module: point at the viewer's own.
    CSS_PATH = os.path.join(os.path.dirname(sys.modules[GaplensApp.__module__].__file__ or ""), "app.tcss")

    def __init__(self, job: JobReading, row: int, mono: bool | None = None) -> None:
        self.job = job
        self.row = row
        super().__init__(job.matched.readings[row].source, mono=mono)
        self._placed = False
        self.next: Next = None  # what to open after this app: set by the Job keys; None quits

    def on_model_ready(self, msg) -> None:
        # This handler runs before the viewer's own (which mounts the timeline): place the view after it.
        if not self._placed:
            self.call_after_refresh(self._place, 20)

    def moment(self) -> tuple[int, int] | None:
        """The straggling moment on this rank's own clock (relative ns), or None without a straggler."""
        s = self.job.straggler
        if s is None:
            return None
        r = self.job.matched.readings[self.row]
        shift = int(self.job.matched.offsets_ns[self.row]) + r.origin_ns
        lo, hi = s.moment_ns
        return lo - shift, hi - shift

    def _place(self, tries: int) -> None:
        tl = self._timeline
        if tl is None or not tl._fitted:
            if tries > 0:
                self.call_after_refresh(self._place, tries - 1)
            return
        self._placed = True
        rank = self.job.matched.ranks[self.row]
        s = self.job.straggler
        what = "the straggler" if s is not None and s.row == self.row else "waiting for the straggler" if s else ""
        self.notify(
            f"rank {rank}{' — ' + what if what else ''}. "
            "J: job overview · r / R: next / previous rank · S: the straggler",
            timeout=10,
        )
        span = self.moment()
        if span is None:
            return
        lo, hi = span
        pad = max((hi - lo) // 10, 1)
        tl.set_viewport(Viewport.fit(lo - pad, hi + pad, tl.cols, margin=0.0, extent=tl.model.extent))
        event = self._collective_event()
        if event is not None:
            tl.select_event(event)

    def _collective_event(self) -> int | None:
        """This rank's kernel of the straggling collective, found by its start."""
        s = self.job.straggler
        m = self.job.matched
        if s is None:
            return None
        k = int(np.argmax(m.start_ns[s.row] == s.arrival_ns)) if (m.start_ns[s.row] == s.arrival_ns).any() else -1
        if k < 0 or not m.present[self.row, k]:
            return None
        r = m.readings[self.row]
        start = int(r.collectives.start_ns[m.row[self.row, k]]) - r.origin_ns
        t = self._timeline.model.trace if self._timeline is not None else None
        if t is None:
            return None
        hit = np.flatnonzero((t.start_ns == start) & (t.kind == int(Kind.KERNEL)))
        return int(hit[0]) if hit.size else None

    # ---- the Job keys ------------------------------------------------------------
    def action_next_rank(self) -> None:
        self._leave_for(("open", neighbour(self.job, self.row, 1)))

    def action_prev_rank(self) -> None:
        self._leave_for(("open", neighbour(self.job, self.row, -1)))

    def action_straggler(self) -> None:
        s = self.job.straggler
        if s is None:
            self.notify("No straggler in this job: the ranks arrive together")
            return
        self._leave_for(("open", s.row))

    def action_job(self) -> None:
        self._leave_for(("job", self.row))

    def _leave_for(self, nxt: Next) -> None:
        self.next = nxt
        self.exit(0)


def _run(app: App):
    """Run one app on its own loop, like ``tui.app.run_app``: never join a loading thread on the way out."""
    loop = asyncio.new_event_loop()
    try:
        return app.run(loop=loop)
    finally:
        loop.close()


def run_job_viewer(paths: list[str], workers: int | None = None, dask: str | None = None) -> int:
    """Read the job (workers report progress on stderr), then alternate overview and rank timelines."""
    from gaplens.analysis.job.run import open_job

    def progress(done: int, total: int) -> None:
        print(f"\rgaplens: reading ranks {done}/{total}", end="" if done < total else "\n", file=sys.stderr)

    job = open_job(paths, workers=workers, dask=dask, progress=progress if sys.stderr.isatty() else None)
    cursor: int | None = None
    unfinished = False
    while True:
        result = _run(JobApp(job, cursor))
        if result is None:
            break
        kind, row = result
        while kind == "open":
            rank_app = RankApp(job, row)
            code = int(_run(rank_app) or 0)
            if rank_app.error:  # this rank's file could not be opened now: back to the overview
                print(f"gaplens: {rank_app.error}", file=sys.stderr)
                rank_app.next = ("job", row)
            unfinished |= not rank_app.loaded
            if rank_app.next is None:
                return _leave(code, unfinished)
            kind, row = rank_app.next
        cursor = row
    return _leave(0, unfinished)


def _leave(code: int, unfinished: bool) -> int:
    if unfinished:  # a rank quit mid-load: its loading thread cannot be interrupted (see run_app)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
