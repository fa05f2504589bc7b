"""The protocol side panel: the current step, what the trace says, and the user's own words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Static

from gaplens.analysis.words import STEP_TITLES

if TYPE_CHECKING:
    from gaplens.analysis.protocol.walk import Step  # a type only: the walk loads when the user opens it

KEYS_HINT = "] next · [ back · e write · b note · m mark phase · B notes · E export · P close"
#: Step 6 proposes one experiment: W asks what-if about it (the lever's change preselected).
STEP6_HINT = "W what if: the lever's change, step by step · [ back · e write · E export · P close"
#: Under the step's text when it does not fit (80×24: step 1's facts are cut): say so, and how to read on.
MORE_HINT = "▼ more below: } scrolls down, { up"


@dataclass
class AnswerSubmitted(Message):
    step: int
    text: str


@dataclass
class AnswerCancelled(Message):
    step: int


class AnswerInput(Input):
    """The one line for the user's words; escape gives the keys back to the timeline."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "back to the timeline", show=False)]

    def action_cancel(self) -> None:
        panel = self.parent
        while panel is not None and not isinstance(panel, ProtocolPanel):
            panel = panel.parent
        self.post_message(AnswerCancelled(panel.step_number if panel else 0))


class ProtocolPanel(Vertical):
    """Docked on the right while protocol mode is on; the app moves the timeline per step."""

    DEFAULT_CSS = """
    ProtocolPanel {
        dock: right; width: 42%; min-width: 34; max-width: 56; height: 1fr;
        border-left: solid $accent; padding: 0 1;
    }
    ProtocolPanel > #protocol-title { text-style: bold; color: $accent; height: auto; }
    ProtocolPanel > #protocol-progress { color: $text-muted; height: auto; }
    ProtocolPanel > #protocol-question { text-style: italic; height: auto; margin: 1 0 0 0; }
    ProtocolPanel > #protocol-facts-box { height: 1fr; margin: 1 0 0 0; }
    ProtocolPanel > #protocol-more { color: $text-accent; height: auto; display: none; }
    ProtocolPanel > #protocol-words-label { text-style: bold; height: auto; }
    ProtocolPanel > #protocol-answer { height: 3; }
    ProtocolPanel > #protocol-keys { color: $text-muted; height: auto; }
    """

    step_number: int = 0

    def compose(self) -> ComposeResult:
        yield Static(id="protocol-title")
        yield Static(id="protocol-progress")
        yield Static(id="protocol-question")
        with VerticalScroll(id="protocol-facts-box"):
            yield Static(id="protocol-facts")
        yield Static(Text(MORE_HINT), id="protocol-more")
        yield Static(Text("Your words (e to write, enter to save)"), id="protocol-words-label")
        yield AnswerInput(id="protocol-answer")
        yield Static(Text(KEYS_HINT), id="protocol-keys")

    def show(self, step: Step, answer: str) -> None:
        self.step_number = step.number
        self.query_one("#protocol-title", Static).update(Text(f"Step {step.number} of 6 · {step.title}"))
        dots = " ".join(("●" if n == step.number else "○") + f" {n}" for n in STEP_TITLES)
        self.query_one("#protocol-progress", Static).update(Text(dots))
        self.query_one("#protocol-question", Static).update(Text(step.question))
        self.query_one("#protocol-keys", Static).update(Text(STEP6_HINT if step.number == 6 else KEYS_HINT))
        facts = Text("What the trace says\n", style="bold")
        for f in step.facts:
            facts.append("• " + f + "\n", style="")
        self.query_one("#protocol-facts", Static).update(facts)
        box = self.query_one(AnswerInput)
        box.value = answer
        box.placeholder = step.suggestion or "type here, enter to save"
        self.query_one("#protocol-facts-box", VerticalScroll).scroll_home(animate=False)
        self.call_after_refresh(self.update_more)

    def on_mount(self) -> None:
        self.watch(self.query_one("#protocol-facts-box", VerticalScroll), "scroll_y", self._scrolled, init=False)

    def on_resize(self) -> None:
        self.call_after_refresh(self.update_more)

    def _scrolled(self, _y: float) -> None:
        self.update_more()

    def update_more(self) -> None:
        """Show ``MORE_HINT`` while the step's text runs past the bottom of its box."""
        facts = self.query_one("#protocol-facts-box", VerticalScroll)
        self.query_one("#protocol-more", Static).display = facts.scroll_y < facts.max_scroll_y

    def scroll_facts(self, pages: int) -> None:
        """Scroll the step's text by ``pages`` boxfuls (less one line, so the reader keeps their place)."""
        facts = self.query_one("#protocol-facts-box", VerticalScroll)
        facts.scroll_relative(y=pages * max(1, facts.size.height - 1), animate=False)

    def focus_answer(self) -> None:
        box = self.query_one(AnswerInput)
        if not box.value and self._suggestion_fits():
            box.value = box.placeholder
        box.focus()
        box.cursor_position = len(box.value)

    def _suggestion_fits(self) -> bool:
        # Step 1 and 6 suggestions are a start the user edits; the generic hint is not.
        return self.query_one(AnswerInput).placeholder != "type here, enter to save"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(AnswerSubmitted(self.step_number, event.value))

    @property
    def facts_text(self) -> str:
        """Plain text of what the panel shows (tests and the export read it)."""
        parts = []
        for wid in ("#protocol-title", "#protocol-question", "#protocol-facts"):
            content = self.query_one(wid, Static).content
            parts.append(content.plain if isinstance(content, Text) else str(content))
        return "\n".join(parts)
