"""The resumable SHA-256 against hashlib, across saved and restored states, on both kernels."""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import sys
import threading

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshnb import cpu, sha256
from meshnb.sha256 import Sha256, Sha256State


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=6))
def test_sha256_matches_hashlib_across_saved_states(data, cuts):
    h = Sha256()
    at = 0
    for cut in sorted(c for c in cuts if c <= len(data)) + [len(data)]:
        h.update(data[at:cut])
        h = Sha256(h.state())  # as a resumed run would
        at = cut
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_sha256_state_is_checked():
    with pytest.raises(ValueError, match="8 u32 words"):
        Sha256State((1, 2), 0, b"")
    with pytest.raises(ValueError, match="tail bytes"):
        Sha256State((0,) * 8, 70, b"")


# ---------------------------------------------------------------------------------------------
# Both kernels


def _hasher(kernel: str) -> type[Sha256]:
    """Sha256 on ``kernel`` (skipped where this CPU has no such kernel)."""
    if kernel not in sha256.KERNELS:
        pytest.skip(f"no {kernel} kernel on this CPU (llvmlite host feature 'sha' is off)")
    return type(f"Sha256_{kernel}", (Sha256,), {"_kernel": staticmethod(sha256.KERNELS[kernel])})


KERNELS = pytest.mark.parametrize("kernel", ["sha-ni", "scalar"])


def test_implementation_is_the_active_kernel():
    forced = os.environ.get("MESHNB_SHA256", "").strip().lower() == "scalar"
    assert ("sha-ni" if sha256.HAS_SHA_NI and not forced else "scalar") == sha256.IMPLEMENTATION
    assert sha256.compress is sha256.KERNELS[sha256.IMPLEMENTATION]
    assert Sha256._kernel is sha256.compress


def test_env_forces_the_scalar_kernel():
    code = "import meshnb.sha256 as s; print(s.IMPLEMENTATION, s.compress is s.compress_scalar)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "MESHNB_SHA256": "scalar"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == ["scalar", "True"]


@KERNELS
@pytest.mark.parametrize("n", [0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 129, 1000])
def test_edges_match_hashlib(kernel, n):
    cls = _hasher(kernel)
    data = bytes((7 * i + n) % 251 for i in range(n))
    h = cls()
    h.update(data)
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    h = cls()
    for i in range(n):  # one byte at a time: every tail length
        h.update(data[i : i + 1])
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()


@KERNELS
def test_random_sizes_match_hashlib(kernel):
    cls = _hasher(kernel)
    rng = np.random.default_rng(5)
    for n in (4095, 65_537, 1_000_003, 3 * 2**20 + 17):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        h = cls()
        h.update(data)
        assert h.hexdigest() == hashlib.sha256(data).hexdigest(), n


@KERNELS
@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=2000), cuts=st.lists(st.integers(0, 2000), max_size=8))
def test_splits_with_saved_states(kernel, data, cuts):
    cls = _hasher(kernel)
    h = cls()
    at = 0
    for cut in sorted(c for c in cuts if c <= len(data)) + [len(data)]:
        h.update(data[at:cut])
        h = cls(h.state())
        at = cut
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()


@KERNELS
def test_numpy_and_buffer_inputs(kernel):
    cls = _hasher(kernel)
    rng = np.random.default_rng(6)
    trace = rng.integers(0, 2**32, (3001, 5), dtype=np.uint32)  # the common input: 20 bytes a step
    parts = [
        trace,
        b"abc",
        bytearray(b"x" * 70),
        memoryview(b"y" * 129),
        trace[:7].view(np.float32),
        np.zeros(0, np.uint32),
        memoryview(trace)[5:900],
    ]
    want = hashlib.sha256()
    h = cls()
    for p in parts:
        want.update(bytes(memoryview(p)))
        h.update(p)
    assert h.hexdigest() == want.hexdigest()
    assert trace.flags.writeable  # the read-only view for the kernel is a view, not the array's flag


@KERNELS
def test_non_contiguous_input_is_refused(kernel):
    h = _hasher(kernel)()
    trace = np.zeros((8, 5), np.uint32)
    with pytest.raises(ValueError, match="C-contiguous") as e:
        h.update(trace[:, :2])
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="C-contiguous") as e:
        h.update(memoryview(b"abcdefgh")[::2])
    assert "\n" not in str(e.value)
    assert h.state() == Sha256().state()  # nothing was counted


def test_state_resumes_on_the_other_kernel():
    a, b = _hasher("sha-ni"), _hasher("scalar")
    data = np.random.default_rng(7).integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    for first, second in ((a, b), (b, a)):
        h = first()
        h.update(data[:4321])
        h2 = second(h.state())
        h2.update(data[4321:])
        assert h2.hexdigest() == hashlib.sha256(data).hexdigest()


@KERNELS
def test_threads_hash_at_once(kernel):
    cls = _hasher(kernel)
    rng = np.random.default_rng(8)
    datas = [rng.integers(0, 2**32, (50_000 + i, 5), dtype=np.uint32) for i in range(4)]
    got: list[str | None] = [None] * 4
    start = threading.Barrier(4)

    def work(i: int) -> None:
        h = cls()
        start.wait()
        for chunk in np.array_split(datas[i], 37):  # many calls, odd tails
            h.update(chunk)
        got[i] = h.hexdigest()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [hashlib.sha256(d.tobytes()).hexdigest() for d in datas]


def test_compress_is_callable_from_njit():
    @numba.njit
    def by_halves(h, data):
        half = data.shape[0] // 2
        sha256.compress(h, data[:half])
        sha256.compress(h, data[half:])

    message = b"z" * 64
    padded = message + b"\x80" + b"\0" * 55 + (8 * len(message)).to_bytes(8, "big")  # FIPS 180-4 5.1.1
    h = np.array(sha256._H0, np.uint32)
    by_halves(h, np.zeros(0, np.uint8))  # no whole block: h unchanged
    assert h.tolist() == list(sha256._H0)
    by_halves(h, np.frombuffer(padded, np.uint8))
    assert h.astype(">u4").tobytes().hex() == hashlib.sha256(message).hexdigest()


@KERNELS
def test_kernels_refuse_strided_data_from_njit(kernel):
    _hasher(kernel)  # skips a kernel this CPU lacks
    fn = sha256.KERNELS[kernel]

    @numba.njit
    def call(h, data):
        fn(h, data)

    with pytest.raises(numba.core.errors.TypingError):  # the kernels read data + offset: C order only
        call(np.zeros(8, np.uint32), np.zeros(256, np.uint8)[::2])


def test_sha_ni_intrinsics_refuse_a_cpu_without_the_feature(monkeypatch):
    monkeypatch.setattr(sha256, "HAS_SHA_NI", False)

    @numba.njit
    def one(h, i):
        return sha256._load4(h, i)

    # A uint16 index: argument types that no kernel has typed yet (numba memoizes intrinsic typing).
    with pytest.raises(numba.core.errors.TypingError, match="'sha' CPU feature"):
        one(np.zeros(8, np.uint32), np.uint16(0))


def _without_sha_ni(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` run in a fresh interpreter on which meshnb.cpu says the CPU has no SHA-NI."""
    prelude = "import meshnb.cpu as c; c.HAS_SHA_NI = False\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )


def test_a_forced_sha_ni_without_the_cpu_feature_is_an_error():
    run = _without_sha_ni("import meshnb.sha256", MESHNB_SHA256="sha-ni")
    assert run.returncode != 0 and "ValueError: MESHNB_SHA256=sha-ni: this CPU has no SHA extensions" in run.stderr
    quiet = _without_sha_ni("import meshnb.sha256 as s; print(s.IMPLEMENTATION)", MESHNB_SHA256="")
    assert quiet.returncode == 0 and quiet.stdout.split() == ["scalar"]  # not asked for: the scalar kernel
    # The program says so in one line, exit 2, no traceback.
    cli = _without_sha_ni(
        "from meshnb.cli import main; raise SystemExit(main(['train', '--steps', '1']))", MESHNB_SHA256="sha-ni"
    )
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert cli.stderr.strip().splitlines() == [
        "meshnb: error: MESHNB_SHA256=sha-ni: this CPU has no SHA extensions (x86 feature 'sha'): "
        "unset it or use 'scalar'"
    ]


def test_compress_refuses_other_types_naming_the_argument():
    with pytest.raises(TypeError, match="compress_scalar: argument 'h' must be a C-contiguous uint32 array"):
        sha256.compress_scalar(np.zeros(8, np.uint64), np.zeros(64, np.uint8))
    with pytest.raises(TypeError, match=r"argument 'data' must be a C-contiguous uint8 array.*non-contiguous"):
        sha256.compress_scalar(np.zeros(8, np.uint32), np.zeros(128, np.uint8)[::2])


@pytest.mark.parametrize("kernel", [None, *sha256.ROWS_KERNELS])
def test_digest_rows_are_hashlib_of_each_rows_two_spans(kernel):
    """The batch digest (the sweep's page digests, each kernel): two spans of each row, rows
    first..last only; lengths about each padding edge (13, 14, 16 words: the 0x80 and the length
    in the same block, or a block more)."""
    rng = np.random.default_rng(7)
    words = rng.integers(0, 1 << 32, size=(37, 300), dtype=np.uint64).astype(np.uint32)
    out = np.zeros((37, 32), dtype=np.uint8)
    spans = [(0, 4, 40, 296), (3, 3, 0, 13), (0, 14, 14, 30), (5, 21, 0, 0), (0, 0, 0, 0), (0, 13, 0, 0), (2, 16, 0, 0)]
    for lo0, hi0, lo1, hi1 in spans:
        out[:] = 0
        sha256.digest_rows(words, lo0, hi0, lo1, hi1, out, 2, 35, kernel=kernel)
        for k in range(37):
            data = words[k, lo0:hi0].astype("<u4").tobytes() + words[k, lo1:hi1].astype("<u4").tobytes()
            want = hashlib.sha256(data).digest() if 2 <= k < 35 else bytes(32)
            assert out[k].tobytes() == want, (lo0, hi0, lo1, hi1, k)


def _shared_blocks_are_hashlib() -> bool:
    """compress_lanes_shared on 5-block messages whose blocks 1, 3 and 4 (with the padding) every
    lane shares, their rounds from schedule_wk, against hashlib of each lane's message; and the
    same lanes with no block marked shared (the vector schedule of every block)."""
    import hashlib

    import numpy as np

    from meshnb import sha256

    n, blocks, nbytes = sha256.LANES, 5, 4 * 77  # 77 words: the 0x80 and the length in block 4
    rng = np.random.default_rng(11)
    one = np.empty(16 * blocks, np.uint32)  # the shared words, SHA-256 (big-endian) readings
    one[:77] = rng.integers(0, 2**32, 77, dtype=np.uint64).astype(np.uint32)
    one[77:] = [sha256.padding_word(t, nbytes, 16 * blocks) for t in range(77, 16 * blocks)]
    msgs = np.repeat(one[:, None], n, axis=1)  # [word, lane]
    shared = np.array([False, True, False, True, True])
    for blk in np.flatnonzero(~shared):
        msgs[16 * blk : 16 * blk + 16] = rng.integers(0, 2**32, (16, n), dtype=np.uint64).astype(np.uint32)
    wk = np.zeros(64 * blocks, np.uint32)
    for blk in np.flatnonzero(shared):
        sha256.schedule_wk(one[16 * blk : 16 * blk + 16], wk, 64 * blk)
    ok = True
    for marks in (shared, np.zeros(blocks, np.bool_)):
        h, s = np.empty(8 * n, np.uint32), np.empty(64 * n, np.uint32)
        sha256.lanes_init(h)
        sha256.compress_lanes_shared(h, np.ascontiguousarray(msgs.reshape(-1)), blocks, s, marks, wk)
        for q in range(n):
            want = hashlib.sha256(msgs[:77, q].astype(">u4").tobytes()).digest()
            ok = ok and h.reshape(8, n)[:, q].astype(">u4").tobytes() == want
    return bool(ok)


def test_shared_blocks_are_hashlib():
    assert _shared_blocks_are_hashlib()


@pytest.mark.skipif(not cpu.IS_X86_64, reason="an x86-64 target (haswell)")
@pytest.mark.slow
def test_lanes_kernel_on_avx2_code_is_hashlib():
    """The multi-buffer kernel compiled for an AVX2 target (8 lanes, no AVX-512: the shape CI's or
    a user's machine may have) in a fresh process, against hashlib: rows, and shared blocks."""
    code = (
        "import hashlib, numpy as np; from meshnb import sha256\n"
        "w = np.random.default_rng(3).integers(0, 2**32, (21, 270), dtype=np.uint64).astype(np.uint32)\n"
        "out = np.zeros((21, 32), np.uint8); sha256.digest_rows(w, 0, 4, 4, 260, out, 0, 21, kernel='lanes')\n"
        "ok = all(out[k].tobytes() == hashlib.sha256(w[k, :260].astype('<u4').tobytes()).digest() for k in range(21))\n"
        "print(sha256.LANES, ok)\n"
        + inspect.getsource(_shared_blocks_are_hashlib)
        + "print(_shared_blocks_are_hashlib())"
    )
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["8", "True", "True"]


@pytest.mark.skipif(sha256.LANES != 16, reason="the target has no 512-bit vectors")
def test_lanes_kernel_is_avx512_code_on_an_avx512_target():
    """The machine code is what the kernel was written for: 512-bit registers, one rotate
    instruction per rotation, ternary logic for Ch and Maj."""
    kernel = numba.njit(nogil=True)(sha256.ROWS_KERNELS["lanes"].py_func)  # a fresh compile: cached code has no text
    out = np.zeros((16, 32), np.uint8)
    kernel(np.zeros((16, 20), np.uint32), 0, 20, 0, 0, out, 0, 16)
    asm = kernel.inspect_asm(kernel.signatures[0])
    assert "zmm" in asm and "vpternlogd" in asm
    assert "vprold" in asm or "vprord" in asm


@numba.njit
def _lane_ops(src, offsets, out, x):
    n = sha256.LANES
    sha256.lanes_store(out, 0, sha256.lanes_load(src, n))  # src's second vector
    sha256.lanes_store(out, n, sha256.lanes_gather(src, 1, sha256.lanes_load(offsets, 0)))
    sha256.lanes_store(out, 2 * n + 1, sha256.lanes_splat(x))  # lanes 1 .. n of out's third row
    sha256.lanes_store(out, 4 * n, sha256.lanes_bswap(sha256.lanes_load(src, 0)))
    return sha256.bswap32(np.uint32(0x3F800000))


def test_lane_intrinsics():
    """The vector intrinsics the lanes kernel is made of, each against numpy."""
    n = sha256.LANES
    assert str(sha256.u32lanes) == f"u32x{n}" and n in (8, 16) and str(sha256.u32x4) == "u32x4"
    src = np.arange(3 * n, dtype=np.uint32) * np.uint32(0x01010101)
    out = np.zeros(5 * n, np.uint32)
    swapped = _lane_ops(src, np.arange(0, 3 * n, 3, dtype=np.uint32), out, 7)
    assert out[:n].tolist() == src[n : 2 * n].tolist()
    assert out[n : 2 * n].tolist() == src.reshape(n, 3)[:, 1].tolist()  # word 1 of every 3-word row
    assert out[2 * n : 4 * n].tolist() == [0] + [7] * n + [0] * (n - 1)
    assert out[4 * n :].tolist() == src[:n].byteswap().tolist()
    assert swapped == 0x803F


def test_lanes_stream_pad_and_digest_out():
    """lanes_start's padding words, message_blocks' bounds, lanes_update/lanes_finish against hashlib
    (a length that needs a block of its own), and lanes_digest_out writing one row only."""
    n = sha256.LANES
    assert (sha256.message_blocks(55), sha256.message_blocks(56), sha256.message_blocks(1040)) == (1, 2, 17)
    h, w = np.zeros(8 * n, np.uint32), np.zeros(16 * n, np.uint32)
    sha256.lanes_start(h, w, 8)
    assert [int(w[t * n]) for t in (2, 3, 14, 15)] == [0x80000000, 0, 0, 0x40] and int(h[0]) == 0x6A09E667
    s, tail = np.empty(64 * n, np.uint32), np.empty(16 * n, np.uint32)
    for words, src in ((20, np.arange(20 * n, dtype=np.uint32)), (14, np.full(14 * n, 0x64636261, np.uint32))):
        sha256.lanes_init(h)
        sha256.lanes_update(h, tail, 0, src, words, s)
        sha256.lanes_finish(h, tail, words % 16, 4 * words, s)
        out = np.zeros((2, 32), np.uint8)
        sha256.lanes_digest_out(h, n - 1, out, 1)
        assert out[1].tobytes() == hashlib.sha256(src.reshape(words, n)[:, n - 1].tobytes()).digest()
        assert not out[0].any()
