"""The ZIP64 records of an npz whose columns are written in place (:class:`meshnb.sweeps.NpzWriter`), as
zipfile writes them with ``force_zip64`` (PKWARE APPNOTE 6.3); measured: docs/performance.md."""

from __future__ import annotations

import io
import struct
import time

import numpy as np

try:  # ISA-L's CRC-32 (python-isal): 11 GB/s against zlib's 3, the in-place npz's largest cost
    from isal.isal_zlib import crc32 as crc32
except ImportError:  # a platform without its wheel: zlib's, the same values
    from zlib import crc32 as crc32


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The .npy (version 2.0) header of a C-order array, what ``np.lib.format.write_array`` writes first."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


def member_headers(name: str, crc: int, size: int, at: int) -> tuple[bytes, bytes]:
    """The local and central headers (with ZIP64 extra fields) of a stored ``name.npy`` whose local
    header is at ``at``; the local one's length does not depend on the numbers."""
    raw = f"{name}.npy".encode()
    t = time.localtime()
    when = (t.tm_hour << 11 | t.tm_min << 5 | t.tm_sec // 2, (t.tm_year - 1980) << 9 | t.tm_mon << 5 | t.tm_mday)
    extra = struct.pack("<HHQQ", 1, 16, size, size)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, *when, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(raw), len(extra))
    extra64 = struct.pack("<HHQQQ", 1, 24, size, size, at)
    head = (0x02014B50, 0x032D, 45, 0, 0, *when, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(raw), len(extra64))
    central = struct.pack("<IHHHHHHIIIHHHHHII", *head, 0, 0, 0, 0o600 << 16, 0xFFFFFFFF)
    return local + raw + extra, central + raw + extra64


def end_records(directory: list[bytes], at: int) -> bytes:
    """The central directory (``directory``, written at ``at``) and the ZIP64 end records (APPNOTE 4.3.14-16)."""
    body, n = b"".join(directory), len(directory)
    end64 = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x032D, 45, 0, 0, n, n, len(body), at)
    locator = struct.pack("<IIQI", 0x07064B50, 0, at + len(body), 1)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF), 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return body + end64 + locator + end
