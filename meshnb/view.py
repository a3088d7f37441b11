"""The view (SPEC 7): a 4096-byte little-endian page, a system's whole state.

``LAYOUT`` is the one table of the page's fields; everything else reads offsets from it. A
:class:`View` wraps any writable 4096-byte buffer without copying, so the page a program writes is
the caller's memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

VIEW_BYTES = 4096
"""The size of a view page in bytes (SPEC 7)."""


@dataclass(frozen=True)
class Field:
    """One field of the view page (a row of :data:`LAYOUT`): SPEC 7's name, byte offset, type, 4-byte elements."""

    name: str
    offset: int  # bytes
    dtype: str  # "f32" or "u32"
    count: int
    meaning: str

    @property
    def nbytes(self) -> int:
        return 4 * self.count

    @property
    def word(self) -> int:
        """Index of the field's first uint32 word."""
        return self.offset // 4


LAYOUT: tuple[Field, ...] = (
    Field("PARAMS", 0, "f32", 4, "a, b, c, d"),
    Field("LR", 16, "f32", 1, "learning rate"),
    Field("STEPS_PER_TASK", 20, "u32", 1, "steps one task runs"),
    Field("INV_BATCH", 24, "f32", 1, "div(1, from_u32(32 N))"),
    Field("NEXT_STEP", 28, "u32", 1, "low half of the next step"),
    Field("ERR", 32, "u32", 1, "1 if the last task timed out"),
    Field("PENDING", 36, "u32", 1, "1 if a round is published but not completed"),
    Field("ROUND", 40, "u32", 1, "low half of that round's number"),
    Field("STEP_HI", 44, "u32", 1, "high half of the next step"),
    Field("X", 64, "f32", 256, "samples x"),
    Field("Y", 1088, "f32", 256, "samples y"),
    Field("LOSS", 2112, "f32", 256, "loss of step t at index t mod 256"),
)
"""The view page's fields (SPEC 7), in page order: the one table every offset is read from."""
FIELDS: dict[str, Field] = {f.name: f for f in LAYOUT}
WORD: dict[str, int] = {f.name: f.word for f in LAYOUT}  # the u32 word index of each field's first word
PAGE_WORDS = VIEW_BYTES // 4
RESERVED: tuple[tuple[int, int], ...] = ((48, 64), (3136, 4096))  # [start, end) byte ranges, zero
HEADER_WORDS = 12  # words 0..11: everything a task reads besides X and Y

# The digest covers PARAMS then LOSS (SPEC 11).
DIGEST_RANGES: tuple[tuple[int, int], ...] = (
    (FIELDS["PARAMS"].offset, FIELDS["PARAMS"].offset + FIELDS["PARAMS"].nbytes),
    (FIELDS["LOSS"].offset, FIELDS["LOSS"].offset + FIELDS["LOSS"].nbytes),
)
DIGEST_SPANS: tuple[tuple[int, int], ...] = tuple((start // 4, end // 4) for start, end in DIGEST_RANGES)
""":data:`DIGEST_RANGES` in words: ``((0, 4), (LOSS, LOSS + 256))``."""


class View:
    """A typed window on one 4096-byte page: ``view[name]`` reads or writes a field of :data:`LAYOUT`
    (a copy of an array field), ``view.words`` is the page as uint32 words.

    Parameters
    ----------
    buffer : bytearray or numpy.ndarray or memoryview, optional
        A writable, contiguous 4096-byte buffer, used in place (default: a new zero page).

    Raises
    ------
    ValueError
        When it is not 4096 bytes, read-only, or not contiguous.

    Examples
    --------
    >>> from meshnb import View
    >>> page = bytearray(4096)
    >>> View(page)["PARAMS"] = [1.0, 2.0, 3.0, 4.0]
    >>> page[4:8]  # the caller's buffer holds the writes
    bytearray(b'\\x00\\x00\\x00@')
    """

    __slots__ = ("buffer", "words")

    def __init__(self, buffer: Any = None) -> None:
        if buffer is None:
            buffer = bytearray(VIEW_BYTES)
        try:
            mem = memoryview(buffer)
        except TypeError:
            raise TypeError(f"a view needs a buffer, not {type(buffer).__name__}") from None
        if mem.nbytes != VIEW_BYTES:
            raise ValueError(f"a view page is {VIEW_BYTES} bytes, this buffer has {mem.nbytes}")
        if mem.readonly:
            raise ValueError("a view page must be writable; this buffer is read-only")
        if not mem.c_contiguous:
            raise ValueError("a view page must be one contiguous buffer")
        self.buffer = buffer
        self.words = np.frombuffer(mem.cast("B"), dtype="<u4")

    @classmethod
    def from_bytes(cls, data: bytes) -> View:
        """A new view holding a copy of ``data`` (a ValueError unless it is one page).

        Parameters
        ----------
        data : bytes

        Returns
        -------
        View

        Examples
        --------
        >>> View.from_bytes(bytes(4096)).next_step
        0
        """
        if len(data) != VIEW_BYTES:
            raise ValueError(f"a view page is {VIEW_BYTES} bytes, got {len(data)}")
        return cls(bytearray(data))

    def array(self, name: str) -> np.ndarray:
        """The live array of field ``name``: writes go to the page.

        Parameters
        ----------
        name : str

        Returns
        -------
        numpy.ndarray
            float32 for an ``f32`` field, uint32 for a ``u32`` one.

        Examples
        --------
        >>> view = View()
        >>> view.array("LOSS")[3] = 0.5
        >>> float(view["LOSS"][3])
        0.5
        """
        f = FIELDS[name]
        words = self.words[f.word : f.word + f.count]
        return words.view("<f4") if f.dtype == "f32" else words

    def word(self, name: str, index: int = 0) -> int:
        """Word ``index`` of field ``name`` as an unsigned integer (its raw bits).

        Parameters
        ----------
        name : str
        index : int, default 0

        Returns
        -------
        int

        Examples
        --------
        >>> hex(View.from_bytes(bytes(4096)).word("LR"))
        '0x0'
        """
        f = FIELDS[name]
        return int(self.words[f.word + index])

    def set_word(self, name: str, value: int, index: int = 0) -> None:
        """Write the raw bits ``value`` (a u32) to word ``index`` of field ``name``, as they are.

        Parameters
        ----------
        name : str
        value : int
        index : int, default 0

        Examples
        --------
        >>> view = View()
        >>> view.set_word("LR", 0x3DCCCCCD)  # the f32 nearest 0.1
        >>> float(view["LR"])
        0.10000000149011612
        """
        f = FIELDS[name]
        self.words[f.word + index] = value

    def __getitem__(self, name: str) -> Any:
        f = FIELDS[name]
        arr = self.array(name)
        if f.count > 1:
            return arr.copy()
        return int(arr[0]) if f.dtype == "u32" else arr[0]

    def __setitem__(self, name: str, value: Any) -> None:
        self.array(name)[...] = value

    @property
    def next_step(self) -> int:
        """The 64-bit next step, ``STEP_HI:NEXT_STEP`` (settable; a ``ValueError`` outside 0 to 2**64 - 1)."""
        return self.word("STEP_HI") << 32 | self.word("NEXT_STEP")

    @next_step.setter
    def next_step(self, step: int) -> None:
        if not 0 <= step < 1 << 64:
            raise ValueError(f"a step is a 64-bit unsigned number, got {step}")
        self.set_word("STEP_HI", step >> 32)
        self.set_word("NEXT_STEP", step & 0xFFFFFFFF)

    def tobytes(self) -> bytes:
        """A copy of the page's 4096 bytes.

        Returns
        -------
        bytes

        Examples
        --------
        >>> len(View().tobytes())
        4096
        """
        return self.words.tobytes()

    def __bytes__(self) -> bytes:
        return self.tobytes()

    def digest(self) -> str:
        """SPEC 11: SHA-256 of the PARAMS bytes followed by the LOSS bytes.

        Returns
        -------
        str

        Examples
        --------
        >>> View().digest()[:16]  # a zero page's
        '256fb9c4796b15a7'
        """
        return page_digests(self.words[None, :])[0].tobytes().hex()

    def __repr__(self) -> str:
        p = " ".join(f"{w:08x}" for w in self.words[:4])
        return f"View(params={p}, next_step={self.next_step}, lr={self.word('LR'):08x})"


def page_digests(words: NDArray[np.uint32]) -> NDArray[np.uint8]:
    """SPEC 11's digest of ``[n, 1024]`` pages, ``[n, 32]`` uint8: the one definition (:meth:`View.digest`'s)."""
    return span_digests(words, DIGEST_SPANS)


def span_digests(words: NDArray[np.uint32], spans: Sequence[tuple[int, int]]) -> NDArray[np.uint8]:
    """SHA-256 (hashlib) of each row's word ``spans``, their little-endian bytes joined, ``[n, 32]`` uint8."""
    rows = np.ascontiguousarray(words, dtype="<u4")
    hashed = np.ascontiguousarray(np.concatenate([rows[:, lo:hi] for lo, hi in spans], axis=1))
    joined = b"".join([hashlib.sha256(row).digest() for row in hashed])
    return np.frombuffer(joined, dtype=np.uint8).reshape(hashed.shape[0], 32).copy()
