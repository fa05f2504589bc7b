"""What every headless command shares: loading a trace with its warnings, printing JSON, clean output streams,
and output paths that are checked before anything is written and written atomically.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from gaplens.loaders import load
from gaplens.loaders.model import Trace, TraceError
from gaplens.loaders.text import clean_text
from gaplens.store.files import Writer, atomic_write

# Characters json.dumps(ensure_ascii=False) leaves raw that a terminal may act on (C1, bidi, surrogates).
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def load_trace(path: str) -> Trace:
    """Load a trace and print each of its warnings as one line on stderr."""
    trace = load(path)
    for warning in trace.meta.warnings:
        print(f"gaplens: warning: {warning}", file=sys.stderr)
    return trace


def print_json(obj: object) -> None:
    """Indented JSON whose strings (keys too) hold no escape sequence or control character.

    Paths come from the user's shell and may hold anything a file name can: an ESC written as
    the ``\\u001b`` escape is still an ESC once ``jq -r`` decodes it, so such characters are
    stripped (``clean_text``, newlines kept) before serialising, not escaped. What remains that a
    terminal could act on (C1, bidi, surrogates) is written as ``\\uXXXX`` escapes.
    """
    text = json.dumps(_clean(obj), indent=2, ensure_ascii=False)
    print(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def _clean(obj: object) -> object:
    """``obj`` with every string passed through ``clean_text`` (newlines kept); other values as they are."""
    if isinstance(obj, str):
        return clean_text(obj, keep_newlines=True)
    if isinstance(obj, dict):
        return {(_clean(k) if isinstance(k, str) else k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def output_file(path: str | os.PathLike, inputs: Iterable[str | os.PathLike], what: str) -> Path:
    """``path`` as a place to write a file, or a TraceError (exit 2) saying why not.

    Refused: the input itself (same inode, so a hard link too), a symlink (writing through it
    lands elsewhere), and anything that exists but is not a regular file (a FIFO would block,
    a device or folder is not a file). ``what`` names the option in the one-line message.
    """
    out = Path(path)
    try:
        st = os.lstat(out)
    except (FileNotFoundError, NotADirectoryError):  # not there yet: writing it says what is wrong
        return out
    except OSError as exc:
        raise TraceError(f"{what} {out}: cannot check it ({exc.strerror or exc}); refused") from None
    if stat.S_ISLNK(st.st_mode):
        raise TraceError(f"{what} {out}: is a symlink; refused (give the real path)")
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a pipe, device or socket)"
        raise TraceError(f"{what} {out}: {kind}; refused")
    for source in inputs:
        with contextlib.suppress(OSError):
            src = os.stat(source)
            if (src.st_dev, src.st_ino) == (st.st_dev, st.st_ino):
                raise TraceError(f"{what} {out}: is the input trace; refused (it would overwrite it)")
    return out


def output_folder(
    path: str | os.PathLike, names: Iterable[str], inputs: Iterable[str | os.PathLike], what: str
) -> Path:
    """``path`` as a folder to write ``names`` into (it may not exist yet), or a TraceError saying why not.

    The folder must not be a symlink nor exist as anything but a folder; each file to be
    written in it passes ``output_file``.
    """
    folder = Path(path)
    inputs = list(inputs)
    try:
        st = os.lstat(folder)
    except (FileNotFoundError, NotADirectoryError):
        return folder  # not there yet: creating it says what is wrong
    except OSError as exc:
        raise TraceError(f"{what} {folder}: cannot check it ({exc.strerror or exc}); refused") from None
    if stat.S_ISLNK(st.st_mode):
        raise TraceError(f"{what} {folder}: is a symlink; refused (give the real path)")
    if not stat.S_ISDIR(st.st_mode):
        raise TraceError(f"{what} {folder}: exists and is not a directory; refused")
    for name in names:
        output_file(folder / name, inputs, what)
    return folder


def write_output(path: Path, data: bytes | Writer) -> Path:
    """Write ``data`` (bytes, or a function writing to a binary file) to ``path`` atomically (a temp file beside
    it, then a rename), OS errors as TraceErrors."""
    try:
        return atomic_write(path if path.is_absolute() else Path(os.getcwd()) / path, data)
    except OSError as exc:
        raise TraceError(f"cannot write {path}: {exc.strerror or exc}") from exc


class CleanStream:
    """A text stream that passes everything through ``clean_text`` (newlines kept) before writing.

    The last guard of the command line: trace text is sanitised where it enters the
    model, but paths come from the user's shell and may hold anything a file name can.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(clean_text(text, keep_newlines=True))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def clean_output() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as ``CleanStream`` for the duration."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = CleanStream(out), CleanStream(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
