"""Every link and repository path the README names resolves in a clone (issue 31: it sent readers to a DESIGN.md
that only the maintainers' folder has)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: A Markdown link or image target: ``[text](target)``.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
#: A backticked path into the repository: it starts with one of the checkout's own top-level folders.
_TOPS = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "__")) and p.name != "docs")
_PATH = re.compile(r"`((?:\.ci|docs|" + "|".join(map(re.escape, _TOPS)) + r")/[^`\s<>*]*)`")


def _targets(doc: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.DOTALL)  # code blocks are examples
    return _LINK.findall(text)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path):
    missing = []
    for target in _targets(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{doc.name} links to what a clone does not have: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_repository_paths_exist(doc: Path):
    text = doc.read_text(encoding="utf-8")
    missing = sorted({p for p in _PATH.findall(text) if not (ROOT / p).exists()})
    assert not missing, f"{doc.name} names paths a clone does not have: {missing}"


def test_no_reference_to_files_outside_the_clone():
    # DESIGN.md lives in the maintainers' shared folder, beside the checkout: a reader of a clone has no such file.
    for doc in DOCS:
        assert "DESIGN.md" not in doc.read_text(encoding="utf-8"), doc.name


def test_definitions_cover_what_a_user_needs():
    text = (ROOT / "docs" / "definitions.md").read_text(encoding="utf-8")
    causes = ("dependency", "sync", "alloc", "copy", "launch", "host", "comm", "profiler", "idle", "unknown")
    for word in ("Busy", "blank region", "step", "experiment", "floor", "What-if", "run-ahead", *causes):
        assert word in text, word
    for change in ("--remove host", "--remove launch", "--remove sync", "--remove alloc", "--remove copy", "--graph"):
        assert change in text, change
