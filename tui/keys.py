"""Every key of the viewer in one table: the timeline's bindings, the help screen and the command palette.

Perfetto users get WASD, vi users get hjkl; arrows work for everyone.
"""

from __future__ import annotations

from textual.binding import Binding, BindingType

# (keys, action, description, shown in the footer)
KEYS: tuple[tuple[str, str, str, bool], ...] = (
    ("plus,equals_sign,w", "zoom_in", "Zoom in at the cursor", True),
    ("minus,s", "zoom_out", "Zoom out at the cursor", True),
    ("a", "pan(-0.125)", "Pan left", False),
    ("d", "pan(0.125)", "Pan right", False),
    ("shift+left,A,pageup", "pan(-0.9)", "Pan left one page", False),
    ("shift+right,D,pagedown", "pan(0.9)", "Pan right one page", False),
    ("left,h", "cursor(-1)", "Move the time cursor left", False),
    ("right,l", "cursor(1)", "Move the time cursor right", False),
    ("up,k", "row(-1)", "Previous row", False),
    ("down,j", "row(1)", "Next row", False),
    ("f", "fit", "Fit the GPU window (first to last GPU activity)", True),
    ("0", "fit_all", "Fit everything in the trace", False),
    ("enter", "select", "Select the event under the cursor", True),
    ("z", "zoom_selection", "Zoom to the selection", False),
    ("g", "next_gap", "Next blank region", True),
    ("G", "prev_gap", "Previous blank region", False),
    ("c", "largest_gap", "Largest blank region on the critical path", True),
    ("x", "next_largest_gap", "Next blank region by size (largest first)", False),
    ("X", "prev_largest_gap", "Previous blank region by size (the larger one)", False),
    ("o", "flow", "Follow the flow: launch ↔ GPU op", True),
    ("space", "toggle_row", "Collapse / expand the row's group; on a +N row, every level of the stack", False),
    ("slash", "app.search", "Search by name", True),
    ("n", "next_match", "Next match", False),
    ("N", "prev_match", "Previous match", False),
    ("p", "app.phase", "Filter to a phase", True),
    ("T", "app.stats", "Statistics: kernels, CUDA API, ranges (a row lists its instances)", True),
    ("L", "app.lists", "Lists: blank regions (largest first) and smells", True),
    ("F", "app.roofline", "Roofline: op families against the hardware floor (needs record_shapes)", False),
    ("W", "app.whatif", "What if: step times predicted after a change (the lever's first)", False),
    ("t,colon", "app.goto_time", "Go to a time (12.5ms, 300us, 1.2s)", False),
    ("1", "set_marker('a')", "Set or clear marker A at the time cursor", False),
    ("2", "set_marker('b')", "Set or clear marker B at the time cursor (A→B time in the header)", False),
    ("P", "app.protocol", "Guided reading: the six-step protocol", False),
    ("i", "app.toggle_details", "Show / hide details", False),
    ("escape", "clear", "Clear selection and search", False),
    # A job (several ranks): the rank overview and the rank timelines both answer these.
    ("r", "app.next_rank", "Job: next rank", False),
    ("R", "app.prev_rank", "Job: previous rank", False),
    ("S", "app.straggler", "Job: the straggler, at the straggling moment", False),
    ("J", "app.job", "Job: back to the rank overview", False),
    ("question_mark", "app.help", "Help", True),
    ("q", "app.quit", "Quit", True),
)

# Footer labels are short; descriptions stay long for help and the palette.
_SHORT = {
    "zoom_in": "zoom+",
    "zoom_out": "zoom−",
    "fit": "fit",
    "select": "select",
    "next_gap": "gap",
    "largest_gap": "critical",
    "flow": "flow",
    "app.search": "search",
    "app.phase": "phase",
    "app.stats": "stats",
    "app.lists": "lists",
    "app.protocol": "guide",
    "app.help": "help",
    "app.quit": "quit",
}


# Footer order: at 80 columns its end is cut, so help and the keys that answer "why is the GPU
# idle?" come first, and the zoom keys (also on the mouse and in help) last.
FOOTER_ORDER = (
    "app.help",
    "app.quit",
    "app.search",
    "largest_gap",
    "next_gap",
    "flow",
    "app.phase",
    "app.stats",
    "app.lists",
    "select",
    "fit",
    "zoom_in",
    "zoom_out",
)


def bindings() -> list[BindingType]:
    rank = {action: k for k, action in enumerate(FOOTER_ORDER)}
    rows = sorted(KEYS, key=lambda k: rank.get(k[1], len(rank)))  # stable: the rest keep their order
    return [
        Binding(keys, action, _SHORT.get(action, desc), show=show, key_display=_display(keys))
        for keys, action, desc, show in rows
    ]


def _display(keys: str) -> str:
    names = {
        "plus": "+",
        "equals_sign": "=",
        "minus": "-",
        "slash": "/",
        "question_mark": "?",
        "space": "space",
        "shift+left": "⇧←",
        "shift+right": "⇧→",
        "colon": ":",
    }
    return "/".join(names.get(k, k) for k in keys.split(",")[:2])


def key_names(keys: str) -> str:
    """Every key of a binding as typed (``? `` rather than ``question_mark``), for help and the palette."""
    return " ".join(_display(k) for k in keys.split(","))


def help_rows() -> list[tuple[str, str]]:
    """(keys, what they do) for the help screen."""
    return [(key_names(keys), desc) for keys, _, desc, _ in KEYS]
