"""A SHA-256 (FIPS 180-4) whose state can be saved and resumed.

hashlib's state cannot be saved, so the trace digest of a run that checkpoints is hashed with
:class:`Sha256`: its state (chaining value, bytes hashed, unfinished block) goes into the
checkpoint, and a resumed run continues the very hash.  The compression kernel releases the GIL,
so a trace can be hashed on another thread while the step loop runs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .floatz import jit

# ---------------------------------------------------------------------------------------------

_K = np.array([
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
], dtype=np.uint64)
_H0 = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
_M32 = np.uint64(0xFFFFFFFF)


@jit()
def _rotr(x: np.uint64, r: int) -> np.uint64:
    return ((x >> np.uint64(r)) | (x << np.uint64(32 - r))) & _M32


@jit(nogil=True)
def _compress(h: np.ndarray, data: np.ndarray, k: np.ndarray) -> None:
    """Fold the whole 64-byte blocks of ``data`` (uint8) into the chaining value ``h`` (uint64[8],
    32-bit values: numba's uint32 arithmetic widens, so the words are kept masked in uint64)."""
    w = np.empty(64, dtype=np.uint64)
    for b in range(data.shape[0] // 64):
        for i in range(16):
            j = 64 * b + 4 * i
            w[i] = (np.uint64(data[j]) << np.uint64(24)) | (np.uint64(data[j + 1]) << np.uint64(16)) \
                | (np.uint64(data[j + 2]) << np.uint64(8)) | np.uint64(data[j + 3])
        for i in range(16, 64):
            s0 = _rotr(w[i - 15], 7) ^ _rotr(w[i - 15], 18) ^ (w[i - 15] >> np.uint64(3))
            s1 = _rotr(w[i - 2], 17) ^ _rotr(w[i - 2], 19) ^ (w[i - 2] >> np.uint64(10))
            w[i] = (w[i - 16] + s0 + w[i - 7] + s1) & _M32
        a, b_, c, d, e, f, g, hh = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
        for i in range(64):
            t1 = (hh + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + ((e & f) ^ (~e & _M32 & g)) + k[i] + w[i]) & _M32
            t2 = ((_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b_) ^ (a & c) ^ (b_ & c))) & _M32
            hh, g, f, e = g, f, e, (d + t1) & _M32
            d, c, b_, a = c, b_, a, (t1 + t2) & _M32
        h[0] = (h[0] + a) & _M32
        h[1] = (h[1] + b_) & _M32
        h[2] = (h[2] + c) & _M32
        h[3] = (h[3] + d) & _M32
        h[4] = (h[4] + e) & _M32
        h[5] = (h[5] + f) & _M32
        h[6] = (h[6] + g) & _M32
        h[7] = (h[7] + hh) & _M32


@dataclass(frozen=True)
class Sha256State:
    """What a resumed hash needs: the chaining value, the bytes hashed, the unfinished block."""

    h: tuple[int, ...]
    length: int
    tail: bytes

    def __post_init__(self) -> None:
        if len(self.h) != 8 or not all(isinstance(x, int) and 0 <= x <= 0xFFFFFFFF for x in self.h):
            raise ValueError("a SHA-256 state has 8 u32 words")
        if not isinstance(self.length, int) or self.length < 0 or len(self.tail) != self.length % 64:
            raise ValueError(f"a SHA-256 state of {self.length} bytes has {self.length % 64} tail bytes, not {len(self.tail)}")


class Sha256:
    """SHA-256 with ``update`` and ``hexdigest`` like hashlib's, and a state to save and resume."""

    def __init__(self, state: Sha256State | None = None) -> None:
        state = state or Sha256State(_H0, 0, b"")
        self._h = np.array(state.h, dtype=np.uint64)
        self._length = state.length
        self._tail = state.tail

    def update(self, data: bytes | bytearray | memoryview) -> None:
        data = bytes(data)
        self._length += len(data)
        buf = self._tail + data
        whole = len(buf) - len(buf) % 64
        if whole:
            _compress(self._h, np.frombuffer(buf, dtype=np.uint8, count=whole), _K)
        self._tail = buf[whole:]

    def state(self) -> Sha256State:
        return Sha256State(tuple(int(x) for x in self._h), self._length, self._tail)

    def hexdigest(self) -> str:
        h = self._h.copy()
        pad = b"\x80" + b"\0" * ((55 - self._length) % 64) + struct.pack(">Q", 8 * self._length)
        _compress(h, np.frombuffer(self._tail + pad, dtype=np.uint8), _K)
        return "".join(f"{int(x):08x}" for x in h)
