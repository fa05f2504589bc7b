"""Small prompts: the search box and the phase picker."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from gaplens.analysis.phases import Phase
from gaplens.analysis.units import fmt_ns
from gaplens.loaders.model import clean_name


class SearchScreen(ModalScreen[str | None]):
    """``/``: a name to search for; enter searches, escape cancels."""

    BINDINGS: ClassVar = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, initial: str = "") -> None:
        super().__init__()
        self.initial = initial

    def compose(self) -> ComposeResult:
        with Vertical(id="search"):
            yield Label("Search event names (case-insensitive substring)")
            yield Input(value=self.initial, placeholder="e.g. gemm, cudaStreamSynchronize", id="search-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class PhaseScreen(ModalScreen[int | None]):
    """``p``: pick a phase to filter the view to; the first entry shows everything again."""

    BINDINGS: ClassVar = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, phases: list[Phase]) -> None:
        super().__init__()
        self.phases = phases

    def compose(self) -> ComposeResult:
        options = [Option("(whole trace)", id="all")]
        for k, p in enumerate(self.phases):
            indent = "  " * min(p.depth, 6)
            options.append(Option(Text(f"{indent}{clean_name(p.name)}  {fmt_ns(p.dur_ns)}"), id=str(k)))
        with Vertical(id="phases"):
            yield Label("Filter to a phase (GPU span)")
            yield OptionList(*options, id="phase-list")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        oid = event.option.id
        if oid is None:  # every option above has an id
            return
        self.dismiss(-1 if oid == "all" else int(oid))

    def action_cancel(self) -> None:
        self.dismiss(None)
