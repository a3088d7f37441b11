"""The view layout against SPEC section 7, and the buffers a view accepts."""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np
import pytest

from meshnb.view import LAYOUT, RESERVED, VIEW_BYTES, View

# Transcribed from SPEC section 7: name -> (byte offset, type, count).
SPEC_TABLE = {
    "PARAMS": (0, "f32", 4),
    "LR": (16, "f32", 1),
    "STEPS_PER_TASK": (20, "u32", 1),
    "INV_BATCH": (24, "f32", 1),
    "NEXT_STEP": (28, "u32", 1),
    "ERR": (32, "u32", 1),
    "PENDING": (36, "u32", 1),
    "ROUND": (40, "u32", 1),
    "STEP_HI": (44, "u32", 1),
    "X": (64, "f32", 256),
    "Y": (1088, "f32", 256),
    "LOSS": (2112, "f32", 256),
}


def test_layout_matches_spec_table():
    assert {f.name: (f.offset, f.dtype, f.count) for f in LAYOUT} == SPEC_TABLE
    assert VIEW_BYTES == 4096


def test_fields_and_reserved_tile_the_page_without_overlap():
    used = np.zeros(VIEW_BYTES, dtype=int)
    for f in LAYOUT:
        used[f.offset : f.offset + f.nbytes] += 1
    for start, end in RESERVED:
        used[start:end] += 1
    assert (used == 1).all()


def test_named_access_reads_and_writes_the_buffer_in_place():
    buf = bytearray(VIEW_BYTES)
    v = View(buf)
    v["LR"] = 0.5
    v.set_word("STEPS_PER_TASK", 64)
    v["X"] = np.arange(256, dtype=np.float32)
    assert buf[16:20] == bytes.fromhex("0000003f")
    assert buf[20:24] == (64).to_bytes(4, "little")
    assert np.frombuffer(bytes(buf[64 + 4 * 3 : 64 + 4 * 4]), "<f4")[0] == 3.0
    assert v["STEPS_PER_TASK"] == 64 and v["LR"] == np.float32(0.5)
    assert v.tobytes() == bytes(buf)


def test_next_step_is_step_hi_next_step():
    v = View()
    v.next_step = 0x1_2345_6789
    assert v.word("STEP_HI") == 1 and v.word("NEXT_STEP") == 0x2345_6789
    with pytest.raises(ValueError, match="64-bit"):
        v.next_step = 1 << 64


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros(VIEW_BYTES, dtype=np.uint8),
        lambda: np.zeros(VIEW_BYTES // 4, dtype=np.uint32),
        lambda: memoryview(bytearray(VIEW_BYTES)),
    ],
)
def test_accepts_any_writable_page_buffer(make):
    buf = make()
    View(buf).set_word("ERR", 7)
    assert bytes(memoryview(buf).cast("B"))[32] == 7


def test_accepts_shared_memory():
    shm = shared_memory.SharedMemory(create=True, size=VIEW_BYTES)
    try:
        v = View(shm.buf)
        v.set_word("ROUND", 0xABCD)
        assert bytes(shm.buf[40:44]) == (0xABCD).to_bytes(4, "little")
        del v
    finally:
        shm.close()
        shm.unlink()


@pytest.mark.parametrize(
    "buf, message",
    [
        (bytearray(4095), "4096 bytes, this buffer has 4095"),
        (bytearray(8192), "4096 bytes, this buffer has 8192"),
        (bytes(4096), "read-only"),
        (np.zeros((64, 128), dtype=np.uint8)[:, ::2], "contiguous"),
    ],
)
def test_rejects_bad_buffers(buf, message):
    with pytest.raises(ValueError, match=message):
        View(buf)


def test_rejects_non_buffers():
    with pytest.raises(TypeError, match="needs a buffer"):
        View([0] * 4096)


def test_from_bytes_copies_and_checks_size():
    data = bytes(range(256)) * 16
    v = View.from_bytes(data)
    v.set_word("ERR", 0)
    assert data[32:36] == bytes([32, 33, 34, 35])
    with pytest.raises(ValueError, match="4096 bytes, got 10"):
        View.from_bytes(b"0123456789")


def test_digest_covers_params_then_loss_only():
    import hashlib

    v = View(bytearray(range(256)) * 16)
    raw = v.tobytes()
    assert v.digest() == hashlib.sha256(raw[0:16] + raw[2112:3136]).hexdigest()
    v.set_word("LR", 123)  # outside the digest
    assert v.digest() == hashlib.sha256(raw[0:16] + raw[2112:3136]).hexdigest()


def test_page_digests_are_view_digests_and_span_digests_hash_the_spans():
    import hashlib

    from meshnb.view import FIELDS, PAGE_WORDS, page_digests, span_digests

    loss = FIELDS["LOSS"]
    assert (loss.offset, loss.count, loss.nbytes, loss.word) == (2112, 256, 1024, 528)
    pages = np.zeros((2, PAGE_WORDS), np.uint32)
    pages[1, 0] = 0x3F800000  # PARAMS[0] = 1.0
    d = page_digests(pages)
    assert d[0].tobytes().hex() == View().digest() and not (d[0] == d[1]).all()
    assert d[1].tobytes().hex() == View.from_bytes(pages[1].tobytes()).digest()
    w = np.arange(12, dtype=np.uint32).reshape(2, 6)
    assert span_digests(w, [(0, 2), (4, 6)])[1].tobytes() == hashlib.sha256(w[1, [0, 1, 4, 5]].tobytes()).digest()


def test_an_init_pages_repr_shows_params_next_step_and_lr_and_its_step_splits():
    from meshnb import Context, init

    ctx = Context(View())
    init(ctx)
    assert repr(ctx.view) == "View(params=00000000 00000000 00000000 00000000, next_step=0, lr=3f000000)"
    ctx.view.next_step = 5 << 32 | 7
    assert (ctx.view.word("STEP_HI"), ctx.view.word("NEXT_STEP")) == (5, 7)
