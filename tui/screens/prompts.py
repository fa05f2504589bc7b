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

from gaplens.analysis.phases import Phase, by_process
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
    """``p``: pick a phase to filter the view to; the first entry shows everything again.

    With several processes, each one's phases sit under its own heading: one rank's ``step 3``
    is never listed among another's.
    """

    BINDINGS: ClassVar = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, phases: list[Phase], processes: dict[int, str] | None = None) -> None:
        super().__init__()
        self.phases = phases
        self.processes = processes or {}

    def compose(self) -> ComposeResult:
        options = [Option("(whole trace)", id="all")]
        groups = by_process(self.phases)
        index = {id(p): k for k, p in enumerate(self.phases)}
        for pid, found in groups.items():
            if len(groups) > 1:
                name = clean_name(self.processes.get(pid, ""))
                label = f"process {pid} {name}".rstrip() if pid >= 0 else "marked by you"
                options.append(Option(Text(label, style="bold"), disabled=True))
            base = min(p.depth for p in found)
            for p in found:
                indent = "  " * (min(p.depth - base, 6) + (len(groups) > 1))
                gpu = f"  GPU {p.device}" if p.device is not None and len(groups) > 1 else ""
                text = Text(f"{indent}{clean_name(p.name)}  {fmt_ns(p.dur_ns)}{gpu}")
                options.append(Option(text, id=str(index[id(p)])))
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
