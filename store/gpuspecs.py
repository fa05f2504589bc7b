"""The user's GPU-spec file: where it lives and reading it (``--gpu-spec FILE``, else the default location).

The rows are parsed and checked by ``analysis.floor.gpuspecs.parse_user_specs``; ``store.install`` hands
``load_user_specs`` to the readings (``analysis.floor.gpuspecs.use_user_rows``), so no reading opens a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gaplens.analysis.floor.gpuspecs import GpuSpec, SpecError, parse_user_specs


def default_spec_path() -> Path:
    """Where a user's own rows live when ``--gpu-spec`` is not given."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gaplens" / "gpus.json"


def load_user_specs(path: str | os.PathLike | None = None) -> list[GpuSpec]:
    """Rows of a user spec file (``path``, else the default location when it exists)."""
    p = Path(path) if path is not None else default_spec_path()
    if path is None and not p.is_file():
        return []
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SpecError(f"cannot read GPU spec file {p}: {exc}") from exc
    return parse_user_specs(data, str(p))
