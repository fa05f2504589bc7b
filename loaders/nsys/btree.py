"""A rowid table's integer fields decoded straight from its B-tree pages with numpy (sqlite.org/fileformat2.html).

Only the plain case is read: a rollback-journal file, a table B-tree whose pages parse
as the format says, records without overflow pages whose needed fields are integers or
NULL, each with a one-byte serial type. Anything else raises ``NotPlain``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

MAGIC = b"SQLite format 3\x00"
LEAF, INTERIOR = 13, 5  # table B-tree page types
_PAD = 16  # bytes before and after the pages, so 8-byte windows never leave the buffer
_MAX_DEPTH = 32

# Per one-byte serial type: bytes in the record body (-1: reserved), whether it is an integer
# or NULL, and the shift that sign-extends a big-endian 8-byte window ending at the field's end
# (64 clears it: NULL, 0 and 1 have no body); then the value to add (NULL marker, 1).
_SIZE = np.zeros(128, np.int32)
_SIZE[:12] = [0, 1, 2, 3, 4, 6, 8, 8, 0, 0, -1, -1]
_SIZE[12:] = (np.arange(12, 128) - 12) // 2
_INTEGER = np.zeros(128, bool)
_INTEGER[[0, 1, 2, 3, 4, 5, 6, 8, 9]] = True
_SHIFT = np.full(128, 64, np.int64)
_SHIFT[1:7] = [56, 48, 40, 32, 16, 0]


class NotPlain(Exception):
    """The file or table is not the plain case this module reads: read it through SQL."""


class PageFile:
    """One database file opened for page reads beside SQLite's own connections (thread-safe: pread)."""

    def __init__(self, fd: int, page_size: int, usable: int, pages: int) -> None:
        self.fd = fd
        self.page_size = page_size
        self.usable = usable  # page size less the bytes reserved at the end of each page
        self.pages = pages
        self._scratch = threading.local()

    @classmethod
    def open(cls, path: str) -> PageFile | None:
        """The file when its header says rollback journal and its pages can be located, else None."""
        if not hasattr(os, "preadv") or _nonempty(path + "-journal") or _nonempty(path + "-wal"):
            return None  # a hot journal or a WAL holds pages the main file does not
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            head = os.pread(fd, 100, 0)
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            return None
        page_size = int.from_bytes(head[16:18], "big") if len(head) == 100 else 0
        page_size = 65536 if page_size == 1 else page_size
        usable = page_size - (head[20] if len(head) == 100 else 0)
        if (
            len(head) < 100
            or not head.startswith(MAGIC)
            or head[18:20] != b"\x01\x01"  # 2 is WAL
            or page_size < 512
            or page_size & (page_size - 1)
            or usable < 480
        ):
            os.close(fd)
            return None
        pages = size // page_size
        declared = int.from_bytes(head[28:32], "big")
        if declared and head[24:28] == head[92:96]:  # the in-header size is valid
            pages = min(pages, declared)
        return cls(fd, page_size, usable, pages)

    def close(self) -> None:
        os.close(self.fd)

    def leaves(self, root: int) -> np.ndarray:
        """Leaf page numbers of the table B-tree at ``root``, in key order (one level at a time)."""
        level = np.array([root], np.int64)
        seen = 1
        for _ in range(_MAX_DEPTH):
            if bool(np.any((level < 2) | (level > self.pages))):
                raise NotPlain
            buf, base = self._read(level[:1])
            if buf[base[0]] == LEAF:  # the tree is balanced: a level of leaves (each batch checks its own)
                return level
            buf, base = self._read(level)
            if not bool(np.all(buf[base] == INTERIOR)):
                raise NotPlain
            ncell = _be16(buf, base + 3)
            if bool(np.any(12 + 2 * ncell > self.usable)):
                raise NotPlain
            # Each page's children: its cells' left pointers in order, then its right-most pointer.
            per = ncell + 1
            n = int(per.sum())
            page_base = np.repeat(base, per)
            k = np.arange(n) - np.repeat(np.cumsum(per) - per, per)
            right = k == np.repeat(ncell, per)
            ptr = _be16(buf, page_base + 12 + 2 * k)
            if bool(np.any(~right & ((ptr < 12 + 2 * np.repeat(ncell, per)) | (ptr > self.usable - 4)))):
                raise NotPlain
            level = _be32(buf, page_base + np.where(right, 8, ptr))
            seen += n
            if seen > self.pages:
                raise NotPlain
        raise NotPlain

    def decode(
        self, leaves: np.ndarray, cids: Sequence[int], null: int, place: Callable[[int], list[np.ndarray]]
    ) -> None:
        """Fields ``cids`` (record positions) of every row on these leaf pages, as int64 with NULL as ``null``,
        into the arrays that ``place(rows)`` gives, one per field.

        Where each record lies (``_records``), where each field ends in it (``_field_ends``), then each
        field read from the 8 bytes ending there (``_copy_field``), every step over the whole batch at once.
        """
        buf, base = self._read(leaves)
        if not bool(np.all(buf[base] == LEAF)):
            raise NotPlain
        ncell = _be16(buf, base + 3)
        if bool(np.any(8 + 2 * ncell > self.usable)):
            raise NotPlain
        out = place(int(ncell.sum()))
        rec, payload = self._records(buf, base, ncell)
        types, lo, hi, ends, body = _field_ends(buf, rec, payload, max(cids, default=-1) + 1)
        del rec, payload
        window = np.ndarray((buf.size - 7,), ">i8", buf, 0, (1,))  # 8 bytes at any offset, big-endian
        add = np.zeros(128, np.int64)
        add[[0, 9]] = [null, 1]
        at = np.empty(body.size, np.int64)
        for c, dst in zip(cids, out, strict=True):
            _copy_field(window, body, types[c], (lo[c], hi[c]), ends[c], add, null, at, dst)

    def _records(self, buf: np.ndarray, base: np.ndarray, ncell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(where each record's header starts in ``buf``, its payload size) for every cell of the leaf pages
        at ``base``; a pointer off its page, an overflow page or a payload past its page is ``NotPlain``."""
        usable = self.usable
        n = int(ncell.sum())
        # Cell k of a page: its pointer is at 8 + 2k; the cell lies after the pointer array.
        page_base = np.repeat(base, ncell)
        at = np.arange(n, dtype=np.int64)
        at <<= 1
        at += np.repeat(base + 8 - 2 * (np.cumsum(ncell) - ncell), ncell)
        ptr = _be16(buf, at)
        if bool(np.any((ptr < np.repeat(8 + 2 * ncell, ncell)) | (ptr > usable - 4))):
            raise NotPlain
        rec = np.add(page_base, ptr, out=at)
        del ptr
        payload, length = _varint(buf, rec)
        rec += length
        rec += _varint_length(buf, rec)  # the rowid: B-tree order is rowid order
        rec -= page_base
        # No overflow pages: the whole record lies on the page.
        if bool(np.any((payload < 1) | (payload > usable - 35) | (rec + payload > usable))):
            raise NotPlain
        rec += page_base
        return rec, payload

    def _read(self, pgnos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pages into one padded buffer, and each page's offset in it; runs are read with one call."""
        ps = self.page_size
        size = _PAD + pgnos.size * ps + _PAD
        buf = getattr(self._scratch, "buf", None)
        if buf is None or buf.size < size:  # one buffer per thread: re-faulting 2 MB a batch costs more than it
            buf = self._scratch.buf = np.zeros(size, np.uint8)
        buf = buf[:size]
        buf[-_PAD:] = 0
        mem = buf.data
        cut = (np.flatnonzero(np.diff(pgnos) != 1) + 1).tolist()
        for a, b in zip([0, *cut], [*cut, pgnos.size], strict=True):
            want = (b - a) * ps
            if os.preadv(self.fd, [mem[_PAD + a * ps : _PAD + b * ps]], (int(pgnos[a]) - 1) * ps) != want:
                raise NotPlain
        return buf, _PAD + np.arange(pgnos.size, dtype=np.int64) * ps


def _field_ends(
    buf: np.ndarray, rec: np.ndarray, payload: np.ndarray, m: int
) -> tuple[np.ndarray, list[int], list[int], dict[int, tuple[int, np.ndarray | None]], np.ndarray]:
    """The serial types of the first ``m`` fields of each record (one row per field), each field's lowest
    and highest type over the batch, where each field ends in the body (a constant, plus a per-row part
    from the fields whose type varies), and the offsets 8 bytes before each body (``rec``, reused)."""
    n = rec.size
    hsize = buf[rec]
    # A one-byte header size and one-byte serial types for every field up to the last needed one.
    if bool(np.any((hsize >= 0x80) | (hsize < 1 + m) | (hsize > payload))):
        raise NotPlain
    types = np.empty((m, n), np.uint8)
    for j in range(m):
        np.take(buf, rec + (1 + j), out=types[j])
    lo, hi = (types.min(axis=1).tolist(), types.max(axis=1).tolist()) if m else ([], [])
    if any(h >= 0x80 for h in hi):
        raise NotPlain
    const, var = 0, None
    ends: dict[int, tuple[int, np.ndarray | None]] = {}
    for j in range(m):
        if lo[j] == hi[j]:
            if _SIZE[lo[j]] < 0:
                raise NotPlain  # a reserved serial type
            const += int(_SIZE[lo[j]])
        else:
            size = _SIZE[types[j]]
            if bool(np.any(size < 0)):
                raise NotPlain
            var = size if var is None else var + size
        ends[j] = (const, var)
    if m and bool(np.any(hsize + (const if var is None else var + const) > payload)):
        raise NotPlain
    body = rec
    body += hsize
    body -= 8
    return types, lo, hi, ends, body


def _copy_field(
    window: np.ndarray,
    body: np.ndarray,
    t: np.ndarray,
    span: tuple[int, int],
    end: tuple[int, np.ndarray | None],
    add: np.ndarray,
    null: int,
    at: np.ndarray,
    dst: np.ndarray,
) -> None:
    """One field of every row into ``dst``: the 8-byte window ending where it ends, sign-extended by its
    serial type ``t`` (``span``: the lowest and highest over the batch); ``at`` is scratch."""
    lo, hi = span
    const, var = end
    np.add(body, const if var is None else var, out=at)
    if const and var is not None:
        at += const
    if lo == hi:  # one type on every row: one shift, or no bytes at all
        if not _INTEGER[lo]:
            raise NotPlain  # a float, text or blob: SQL judges it
        shift = int(_SHIFT[lo])
        if shift == 64:
            dst.fill(int(add[lo]))
            return
        dst[...] = window[at]  # the 8 bytes ending where the field ends
        if shift:
            dst <<= shift
            dst >>= shift
        elif bool(np.any(dst == null)):
            raise NotPlain  # a stored value that reads like NULL: a filter on it must see which
        return
    if not bool(np.all(_INTEGER[t])):
        raise NotPlain
    dst[...] = window[at]
    shift_t = _SHIFT[t]
    dst <<= shift_t
    dst >>= shift_t
    dst += add[t]
    if lo <= 6 <= hi and bool(np.any((dst == null) & (t == 6))):
        raise NotPlain


def _nonempty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _be16(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    return (buf[at].astype(np.int64) << 8) | buf[at + 1]


def _be32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    return as_strided(buf, (buf.size - 4, 4), (1, 1))[at].view(">u4").ravel().astype(np.int64)


def _varint(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value, length in bytes) of the varint at each offset, for values below 2**56."""
    b = buf[at]
    value = (b & 0x7F).astype(np.int64)
    length = np.ones(at.size, np.int64)
    more = np.flatnonzero(b >= 0x80)
    for k in range(1, 8):
        if more.size == 0:
            return value, length
        b = buf[at[more] + k]
        value[more] = (value[more] << 7) | (b & 0x7F)
        length[more] += 1
        more = more[b >= 0x80]
    if more.size:
        raise NotPlain  # a payload this large has overflow pages anyway
    return value, length


def _varint_length(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Length in bytes of the varint at each offset (1 to 9)."""
    length = np.ones(at.size, np.int64)
    more = np.flatnonzero(buf[at] >= 0x80)
    for k in range(1, 8):
        if more.size == 0:
            break
        length[more] += 1
        more = more[buf[at[more] + k] >= 0x80]
    length[more] += 1  # the ninth byte always ends it
    return length
