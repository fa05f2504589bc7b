"""Cut the ``traceEvents`` array into blocks of whole events: by the writer's layout when it holds, else by structure.

Kineto writes each event as an indented object and puts the same bytes between
any two events (``},\\n  {``). The first block is cut by the structural scan
(``jsonframe.split_block``), which also shows whether every gap between events is
the same text; if that text holds a newline, later blocks are cut at the last
occurrence of ``}`` gap ``{`` in the buffer, a search from its end, and are handed
to Arrow as they are (the comma blanked), multi-line events and all.

Why a cut there is safe to try: a raw newline never occurs inside a JSON string, so
the ``}``, ``,`` and ``{`` around it are structural, and ``},{`` only occurs between
two elements of an array. A cut is therefore either between two events or inside a
deeper array of one event; the latter leaves an unclosed object that the parser
refuses. When Arrow refuses a layout block for any reason, the reader calls
``rewind`` and the rest of the file, from that block on, is cut by structure.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from gaplens.loaders.kineto.jsonframe import array_start, find_byte, split_block, string_quotes, top_level

_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 13, 32]] = True
#: A run of blanks outside strings this long keeps one blank: no writer pads JSON so, and a gzip of
#: blanks (a bomb) must not be held whole. Shorter runs are left as they are, so every real file is
#: framed byte for byte.
SQUEEZE = 1 << 16
_HALF = SQUEEZE // 2  # any run of SQUEEZE blanks covers two samples this far apart
_BLANKS = frozenset(b" \t\r\n")
_BLANK_RUN = re.compile(rb"[ \t\r\n]*")
#: Bytes of text after the events worth reading for their keys (real traces: a few KB).
TRAILER_LIMIT = 64 << 20


def _long_runs(chunk: bytes) -> list[tuple[int, int]]:
    """(start, end) of the runs of at least SQUEEZE blanks in ``chunk``, found from samples _HALF apart
    (a real chunk costs a few hundred short regex matches)."""
    runs: list[tuple[int, int]] = []
    n, done = len(chunk), 0
    for k in range(0, n, _HALF):
        if k < done or chunk[k] not in _BLANKS:
            continue
        run = _BLANK_RUN.match(chunk, k)
        end = run.end() if run is not None else k
        done = end
        if end - max(k - _HALF + 1, 0) < SQUEEZE:
            continue  # too short even if it began right after the previous sample
        lo = max(k - _HALF + 1, 0, runs[-1][1] if runs else 0)
        start = lo + len(chunk[lo : k + 1].rstrip(b" \t\r\n"))
        if end - start >= SQUEEZE:
            runs.append((start, end))
    return runs


class Squeeze:
    """Long blank runs outside strings cut to one blank as chunks arrive; where, to map positions back."""

    def __init__(self) -> None:
        self.at: list[int] = []  # squeezed document position just after each kept blank
        self.removed: list[int] = []  # bytes removed there, cumulative
        # Where the last chunk with runs ended (squeezed position), whether a string was open there
        # and whether its last byte was an escaping backslash: the next chunk is scanned alone.
        self._end, self._inside, self._escape = -1, False, False

    def chunk(self, before: Sequence[bytes | bytearray], chunk: bytes, doc_at: int) -> bytes:
        """``chunk`` with its long blank runs cut, when outside strings; ``before`` is the buffered text
        (which starts outside any string) and ``doc_at`` the squeezed position where ``chunk`` starts."""
        runs = _long_runs(chunk)
        if not runs:
            return chunk
        if doc_at == self._end:  # continues the last chunk scanned: its state, not the buffer again
            lead = b"\\" if self._escape else b""
            quotes = string_quotes(np.frombuffer(lead + chunk, np.uint8)) - len(lead)
            inside = self._inside
        else:
            head = b"".join(before)
            quotes = string_quotes(np.frombuffer(head + chunk, np.uint8)) - len(head)
            inside = bool(np.count_nonzero(quotes < 0) & 1)  # the buffer starts outside any string
            quotes = quotes[quotes >= 0]
        parts, kept, last = [], 0, 0
        for start, end in runs:
            if (int(np.searchsorted(quotes, start)) + inside) & 1:
                continue  # inside a string: its text is the trace's
            parts.append(chunk[last : start + 1])
            kept += start + 1 - last
            last = end
            self.at.append(doc_at + kept)
            self.removed.append((self.removed[-1] if self.removed else 0) + end - start - 1)
        out = b"".join([*parts, chunk[last:]]) if parts else chunk
        tail = len(chunk) - len(chunk.rstrip(b"\\"))
        self._escape = bool((tail + (self._escape if tail == len(chunk) else 0)) & 1)
        self._inside = bool((quotes.size + inside) & 1)
        self._end = doc_at + len(out)
        return out

    def original(self, pos: int) -> int:
        """The position in the file's text of squeezed position ``pos``."""
        i = bisect.bisect_right(self.at, pos)
        return pos + (self.removed[i - 1] if i else 0)


@dataclass
class Piece:
    """One block of whole events, in file order.

    ``gap`` is the separator of a layout block, whose ``data`` is the raw text
    ``{…}<gap>{…}`` (a bytearray: ``arrow_input`` blanks the separators' commas in place,
    noting where in ``blanked``, so a block in flight is held once; ``raw`` puts them back);
    for a block cut by structure ``gap`` is None and ``data`` is NDJSON (a uint8 array,
    string pids/tids renamed ``pis``/``tis``).
    """

    seq: int
    data: bytearray | np.ndarray
    gap: bytes | None
    offset: int  # position in the decompressed document of the block's first byte (layout blocks)
    blanked: np.ndarray | None = None

    def raw(self) -> bytes:
        """The block's text as framed."""
        if self.blanked is not None:
            np.frombuffer(self.data, np.uint8)[self.blanked] = 44  # the commas
            self.blanked = None
        return bytes(self.data)


@dataclass
class Framed:
    """What ``frame_events`` learned besides the event blocks (filled as the scan proceeds)."""

    top: dict = field(default_factory=dict)  # top-level keys other than traceEvents
    events: int = 0  # complete events handed out
    warnings: list[str] = field(default_factory=list)


def damage_warning(kept: int, at: int) -> str:
    return f"the file is truncated or damaged: kept the {kept} events before byte {at}, dropped the rest"


class EventBlocks:
    """Iterate ``Piece``s of whole events from decompressed chunks; ``top`` holds the other keys after.

    The consumer confirms pieces in order (``confirm``) or, when Arrow refuses a layout
    piece, calls ``rewind`` with it: iteration then continues from that piece's first
    byte, cut by structure to the end of the file.
    """

    def __init__(self, chunks: Iterable[bytes], block_size: int = 1 << 20, layout: bool = True) -> None:
        self.top: dict = {}
        self.warnings: list[str] = []
        self.damaged_at: int | None = None  # where the array stops making sense, when it does
        self.structural_events = 0
        self._it = iter(chunks)
        self._block = block_size
        self._layout_allowed = layout
        self._gap: bytes | None = None
        self._parts: list[bytes | bytearray] = []
        self._size = 0
        self._chunk = 0  # bytes in the last chunk read
        self._offset = 0  # document position of the first buffered byte
        self._exhausted = False
        self._done = False
        self._grow = False  # the last pass could not cut: read at least one more chunk
        self._seq = 0
        self._handed: deque[Piece] = deque()  # layout pieces not yet confirmed
        self._tail: bytes | bytearray | None = None  # the raw text handed from layout to structure at the end
        self._prefix = b""
        self._bare = False
        self._started = False
        self.squeeze = Squeeze()

    def __iter__(self) -> Iterator[Piece]:
        return self

    def __next__(self) -> Piece:
        if not self._started:
            self._start()
        while not self._done:
            piece = self._layout_piece() if self._gap is not None else self._structural_piece()
            if piece is not None:
                return piece
        raise StopIteration

    @property
    def layout(self) -> bytes | None:
        """The separator layout blocks are cut at, while cutting by layout."""
        return self._gap

    def confirm(self, seq: int) -> None:
        """Piece ``seq`` and those before it were read: they will never be rewound to."""
        while self._handed and self._handed[0].seq <= seq:
            self._handed.popleft()

    def rewind(self, seq: int) -> None:
        """Cut everything from layout piece ``seq`` on again, by structure."""
        pieces = [p for p in self._handed if p.seq >= seq]
        if not pieces or pieces[0].seq != seq or pieces[0].gap is None:
            raise ValueError(f"piece {seq} cannot be rewound to")
        gap = pieces[0].gap
        rest = self._tail if self._tail is not None else b"".join(self._parts)
        raw = gap.join(p.raw() for p in pieces) + gap + rest
        self._parts, self._size, self._offset = [raw], len(raw), pieces[0].offset
        self._handed.clear()
        self._gap, self._layout_allowed, self._tail = None, False, None
        self._done, self._grow = False, False
        self.top, self.warnings, self.damaged_at = {}, [], None

    # ---- reading -------------------------------------------------------------
    def _start(self) -> None:
        self._started = True
        head = b""
        while True:
            chunk = next(self._it, None)
            if chunk is not None:
                head += self.squeeze.chunk([head], chunk, len(head))
            found = array_start(head, final=chunk is None)
            if found is not None:
                break
        start, self._bare = found
        self._prefix = head[: start - 1]
        self._parts, self._size, self._offset = [head[start:]], len(head) - start, start

    def _fill(self, target: int | None = None) -> None:
        # Could not cut: at least one more chunk, and double the buffer, so an event of any size is
        # scanned a bounded number of times (once per doubling), not once per chunk.
        want = 2 * self._size + 1 if self._grow else (self._block if target is None else target)
        while self._size < want and not self._exhausted:
            chunk = next(self._it, None)
            if chunk is None:
                self._exhausted = True
                break
            chunk = self.squeeze.chunk(self._parts, chunk, self._offset + self._size)
            self._parts.append(chunk)
            self._size += len(chunk)
            self._chunk = len(chunk)
        self._grow = False

    def _owned(self) -> bytearray:
        """The buffered bytes as one bytearray of the framer's own, later chunks appended in place."""
        head = self._parts[0] if self._parts else b""
        buf = head if isinstance(head, bytearray) else bytearray(head)
        for chunk in self._parts[1:]:
            buf += chunk
        self._parts = [buf]
        return buf

    def _keep(self, rest: bytes | bytearray, consumed: int) -> None:
        self._parts, self._size = [rest], len(rest)
        self._offset += consumed

    def _next_piece(self, data: bytearray | np.ndarray, gap: bytes | None, offset: int) -> Piece:
        piece = Piece(self._seq, data, gap, offset)
        self._seq += 1
        return piece

    def _layout_piece(self) -> Piece | None:
        # Cut at the buffer's last separator, so only part of one event is copied again: the
        # piece is the buffer itself (each byte copied once, on this thread, which holds the
        # GIL for it). Filling stops half a chunk short of a block, so pieces average a block.
        self._fill(self._block - self._chunk // 2)
        gap = self._gap
        assert gap is not None
        buf = self._owned()
        sep = b"}" + gap + b"{"
        cut = -1 if self._exhausted else buf.rfind(sep)
        if cut < 0:
            if self._exhausted:
                # The end of the array and what follows it: cut by structure, which finds them.
                self._tail = buf
                self._gap = None
                self._parts, self._size = [buf], len(buf)
                return None
            self._parts, self._grow = [buf], True
            return None
        skip = cut + 1 + len(gap)
        rest = buf[skip:]
        del buf[cut + 1 :]
        piece = self._next_piece(buf, gap, self._offset)
        self._handed.append(piece)
        self._keep(rest, skip)
        return piece

    def _structural_piece(self) -> Piece | None:
        self._fill()
        buf = b"".join(self._parts)
        res = split_block(buf)
        piece = None
        if res.count:
            self.structural_events += res.count
            piece = self._next_piece(res.ndjson, None, self._offset)
        if res.array_end is not None:
            trailer = self._trailer(buf[res.array_end :])
            self.top = top_level(self._prefix, trailer, self._bare, self.warnings)
            self._done = True
        elif res.damage is not None or self._exhausted:
            self._damage(self._offset + (res.damage if res.damage is not None else res.consumed))
        else:
            self._keep(buf[res.consumed :], res.consumed)
            self._grow = not res.count
            if self._layout_allowed and res.count:
                self._decide_layout(res.gap)
        return piece

    def _trailer(self, first: bytes) -> bytes:
        """The text after the events' ``]``: its blank runs squeezed, at most TRAILER_LIMIT bytes of it."""
        parts, size = [first], len(first)
        for chunk in self._it:
            chunk = self.squeeze.chunk(parts, chunk, 0)  # positions after the events are never reported
            parts.append(chunk)
            size += len(chunk)
            if size > TRAILER_LIMIT:
                self.warnings.append(f"more than {TRAILER_LIMIT >> 20} MB after the events: keys there are ignored")
                return b"" if self._bare else b"}"
        return b"".join(parts)

    def _decide_layout(self, gap: bytes | None) -> None:
        """Cut by layout from here on when the first block's events are all apart by one text with a newline."""
        rest = b"".join(self._parts)
        if gap is not None and len(rest) <= len(gap):
            return  # cannot tell yet whether the next event follows the same gap
        self._layout_allowed = False  # decided once
        if gap is None or b"\n" not in gap or gap.count(b",") != 1 or not rest.startswith(gap + b"{"):
            return
        self._gap = gap
        self._keep(rest[len(gap) :], len(gap))

    def _damage(self, at: int) -> None:
        self.damaged_at = self.squeeze.original(at)
        truncated = b"]}" if not self._bare else b"]"
        self.top = top_level(self._prefix, truncated, self._bare, self.warnings, truncated=True)
        self._done = True


def frame_events(chunks: Iterable[bytes], framed: Framed, block_size: int = 2 << 20) -> Iterator[np.ndarray]:
    """Yield NDJSON blocks (uint8 arrays) of complete events, cut by structure; fill ``framed``.

    String-valued ``pid``/``tid`` keys come out renamed ``pis``/``tis``.
    """
    blocks = EventBlocks(chunks, block_size, layout=False)
    for piece in blocks:
        framed.events = blocks.structural_events
        assert isinstance(piece.data, np.ndarray)
        yield piece.data
    framed.events = blocks.structural_events
    framed.top = blocks.top
    framed.warnings.extend(blocks.warnings)
    if blocks.damaged_at is not None:
        framed.warnings.append(damage_warning(framed.events, blocks.damaged_at))


def arrow_input(piece: Piece, twins: dict[bytes, bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(text Arrow reads as whitespace-separated objects, position that ends each event but the last).

    A layout piece gets the comma of every separator blanked, in place; in both kinds the
    string values of the keys in ``twins`` move to the twin key (same length), so that Arrow
    sees one type per field, in a copy (the per-event fallback reads the keys as written).
    """
    if piece.gap is None:
        text = np.asarray(piece.data, dtype=np.uint8)
        ends = find_byte(text, 10)
    elif piece.blanked is not None:  # parsed before (a retry after learning a twin)
        text, ends = np.frombuffer(piece.data, np.uint8), piece.blanked
    else:
        gap = piece.gap
        text = np.frombuffer(piece.data, np.uint8)
        k = len(gap)
        brace = find_byte(text, 123)
        brace = brace[brace > k]
        ok = text[brace - k - 1] == 125
        for j, byte in enumerate(gap):
            ok &= text[brace - k + j] == byte
        ends = brace[ok] - k + gap.index(b",")
        text[ends] = 32
        piece.blanked = ends
    if twins:
        text = text.copy()
        rename_string_values(text, twins)
    return text, ends


def rename_string_values(text: np.ndarray, twins: dict[bytes, bytes]) -> None:
    """``"key": "v"`` -> ``"twin": "v"`` in place, for each key of ``twins`` (twins have the key's length).

    Finds colons right after a closing quote and right before an opening quote (one
    space allowed between), then compares the key bytes: vectorised over the block.
    """
    colon = find_byte(text, 58)
    colon = colon[(colon > 1) & (colon + 2 < text.size)]
    after = np.where(text[colon + 1] == 32, colon + 2, colon + 1)
    colon = colon[(text[after] == 34) & (text[colon - 1] == 34)]
    for key, twin in twins.items():
        size = len(key)
        at = colon[colon >= size + 2]
        ok = text[at - size - 2] == 34
        for j, byte in enumerate(key):
            ok &= text[at - size - 1 + j] == byte
        at = at[ok]
        for j, (old, new) in enumerate(zip(key, twin, strict=True)):
            if old != new:
                text[at - size - 1 + j] = new
