"""The op space (:mod:`meshnb.conformance.mutants`): the model's step with no mutant is the independent
references' (numpy and plain Python), bit for bit; the mutants that restate a whole-run fault model give that
model's bits; directed rounding against exact rational arithmetic; every mutant runs as a
:func:`faults.run` executor."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from meshnb.conformance import faults, mutants
from meshnb.conformance import model as step
from meshnb.conformance.fpu import Directed, Ops
from meshnb.testing import reference as R
from meshnb.testing.reference import init_page

Z = Ops()


def _words(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """f32 words of every kind: ordinary values, tiny ones near the flush boundary, subnormals, NaN."""
    normal = rng.uniform(-3, 3, shape).astype(np.float32).view(np.uint32)
    tiny = (rng.uniform(0.5, 2, shape) * 2.0**-126 * rng.choice([-1, 1], shape)).astype(np.float32).view(np.uint32)
    sub = rng.integers(1, 1 << 23, shape, dtype=np.uint32) | rng.choice([0, 0x80000000], shape).astype(np.uint32)
    pick = rng.integers(0, 10, shape)
    out = np.where(pick < 7, normal, np.where(pick < 9, tiny, sub)).astype(np.uint32)
    out[rng.integers(0, 40, shape) == 0] = 0x7FC00001
    return out


@pytest.mark.parametrize("seed", range(4))
def test_the_step_without_a_mutant_is_the_references(seed: int) -> None:
    """The model's interpreter with no op changed against the independent references (numpy's
    step_sums, plain Python's ops for apply, loss and the fold), on words of every kind."""
    rng = np.random.default_rng(seed)
    b = 24
    p, x, y = _words(rng, (b, 4)), _words(rng, (b, 32)), _words(rng, (b, 32))
    # small params, so that the products reach the flush boundary too
    p[: b // 2] = (rng.uniform(-1, 1, (b // 2, 4)) * 2.0**-60).astype(np.float32).view(np.uint32)
    off = int(rng.integers(0, 8))
    sums = step.sums({}, p, x, y)
    for k in range(b):
        xs, ys = np.zeros(256, dtype=np.uint32), np.zeros(256, dtype=np.uint32)
        xs[off::8], ys[off::8] = x[k], y[k]
        want = R.step_sums(p[k].view(np.float32), xs.view(np.float32), ys.view(np.float32), off)
        assert np.array_equal(sums[k], np.asarray(want, dtype=np.float32).view(np.uint32)), k
    lr, inv = _words(rng, (b, 1)), _words(rng, (b, 1))
    s = _words(rng, (b, 5))
    new = step.apply({}, p, s, lr, inv)
    lossw = step.loss({}, s, inv)
    for k in range(b):
        pk, sk, lk, ik = (int(w) for w in p[k]), [int(w) for w in s[k]], int(lr[k, 0]), int(inv[k, 0])
        want_p = [R.py_sub(w, R.py_mul(lk, R.py_mul(sk[j], ik))) for j, w in enumerate(pk)]
        assert new[k].tolist() == want_p and int(lossw[k]) == R.py_mul(sk[4], ik)
    own = s[:5]
    acc = [R.py_flush(int(w)) for w in own[0]]
    for row in own[1:]:
        acc = [R.py_add(a, R.py_flush(int(w))) for a, w in zip(acc, row)]
    assert step.fold({}, own).tolist() == acc


@pytest.mark.parametrize(
    ("op", "alt", "model", "systems"),
    [
        ("butterfly", "sequential", "sequential-lane-sum", 1),
        ("lr*g", "fused", "fma-apply", 1),
        ("fold", "reverse", "fold-reverse", 3),
    ],
)
def test_a_mutant_that_restates_a_model_gives_its_bits(op: str, alt: str, model: str, systems: int) -> None:
    pages = [init_page()] * systems if systems == 1 else [init_page(systems, k) for k in range(systems)]
    lr = {0: 0x3F333333}  # LR 0.7: not a power of two, so that apply's roundings show
    mine = faults.run(pages, 200, grouped=systems > 1, set_lr=lr, m=faults.single_op(op, alt))
    theirs = faults.run(pages, 200, grouped=systems > 1, set_lr=lr, m=faults.model(model))
    exact = faults.run(pages, 200, grouped=systems > 1, set_lr=lr)
    assert mine.pages == theirs.pages and np.array_equal(mine.trace, theirs.trace)
    assert mine.pages != exact.pages  # the fault shows on this run


def _exact(a: int, b: int, kind: str) -> Fraction:
    fa, fb = (Fraction(float(np.uint32(w).view(np.float32))) for w in (a, b))
    return fa + fb if kind == "add" else fa - fb if kind == "sub" else fa * fb


def _directed_ref(q: Fraction, direction: str) -> int:
    """The f32 word of ``q`` rounded in the direction: the nearest f32 and its neighbours, by rationals."""
    near = np.float32(float(q))  # within an ulp
    cands = [near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))]
    fin = [c for c in cands if np.isfinite(c)]
    if direction == "up":
        best = min((c for c in fin if Fraction(float(c)) >= q), key=lambda c: Fraction(float(c)))
    elif direction == "down":
        best = max((c for c in fin if Fraction(float(c)) <= q), key=lambda c: Fraction(float(c)))
    else:
        best = max((c for c in fin if abs(Fraction(float(c))) <= abs(q)), key=lambda c: abs(Fraction(float(c))))
    return int(np.float32(best).view(np.uint32))


@pytest.mark.parametrize("direction", ["zero", "up", "down"])
@pytest.mark.parametrize("kind", ["add", "sub", "mul"])
def test_directed_rounding_against_rationals(direction: str, kind: str) -> None:
    rng = np.random.default_rng(7)
    a = rng.uniform(-4, 4, 3000).astype(np.float32).view(np.uint32)
    b = (rng.uniform(-4, 4, 3000) * 2.0 ** rng.integers(-40, 3, 3000)).astype(np.float32).view(np.uint32)
    got = getattr(Directed(direction), kind)(a, b)
    want = [_directed_ref(_exact(int(x), int(y), kind), direction) for x, y in zip(a, b)]
    bad = np.nonzero(got != np.array(want, dtype=np.uint32))[0]
    assert len(bad) == 0, [(hex(a[i]), hex(b[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]
    assert (got != Z.__getattribute__(kind)(a, b)).sum() > 500  # it is another rounding than mode Z's


def test_f64_and_fused_alternatives_round_once_at_the_consumer() -> None:
    x = np.array([[0x3F7FFFFF, 0xBF555555]], dtype=np.uint32)
    xf = x.view(np.float32).astype(np.float64)
    v = step.lanes({"x2": "f64"}, np.zeros((1, 4), dtype=np.uint32), x, np.zeros_like(x))
    assert np.array_equal(v["x3"], (xf * xf * xf).astype(np.float32).view(np.uint32))  # x*x kept in f64
    e = np.array([[0x3F800001]], dtype=np.uint32)
    fused = step.node({"e*x": "fused"}, "e*x", e, e)
    assert isinstance(fused, step.Fused)
    ef = float(e.view(np.float32)[0, 0])
    want = np.float32(Fraction(ef) * Fraction(ef) - 1)  # ef*ef - 1 in one rounding (exact, then f32)
    got = step.node({}, "e", fused, np.array([[0x3F800000]], dtype=np.uint32))
    assert int(got[0, 0]) == int(np.float32(want).view(np.uint32))


def test_every_mutant_runs_as_an_executor_and_names_itself() -> None:
    pages = [init_page(2, k) for k in range(2)]
    changed = 0
    for mut in mutants.mutations():
        m = faults.single_op(mut.op, mut.alt)
        assert m.name == mut.name and m.mutant == mut and m.doc.startswith("mode Z except `")
        r = faults.run(pages, 3, grouped=True, m=m, from_init=True)
        assert len(r.pages) == 2 and r.trace.shape == (3, 5)
        changed += r.pages != faults.run(pages, 3, grouped=True, from_init=True).pages
    assert changed > 40  # many change the bits of even three ordinary steps


def test_bad_mutants_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown op 'e\\*x4'"):
        faults.single_op("e*x4", "fused")
    with pytest.raises(ValueError, match="op 'loss' has no alternative 'fused'"):
        mutants.Mutant("loss", "fused")
