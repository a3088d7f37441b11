"""meshnb.runspec: the one description of a run and its rules, the same answer from every entry point."""

import dataclasses

import numpy as np
import pytest

import meshnb
from meshnb import runspec
from meshnb.runspec import OptionError
from meshnb.testing import reference as ref
from meshnb.view import WORD, View


@pytest.mark.parametrize("x", [3, np.int8(3), np.uint64(3), np.int64(3)])
def test_any_integer_type_is_an_integer(x):
    assert runspec.is_int(x) and runspec.check_int(x, "n", 0, 5) == 3
    assert type(runspec.check_int(x, "n", 0, 5)) is int


@pytest.mark.parametrize("x", [True, np.bool_(True), 3.0, "3", None])
def test_bool_and_the_rest_are_no_integers(x):
    assert not runspec.is_int(x)
    with pytest.raises(TypeError, match="n must be an integer from 0 to 5"):
        runspec.check_int(x, "n", 0, 5)


def test_a_value_out_of_range_is_an_option_error_showing_the_plain_number():
    with pytest.raises(OptionError, match=r"^systems must be an integer from 1 to 64, got 70$") as e:
        runspec.check_int(np.int64(70), "systems", 1, 64)
    assert isinstance(e.value, ValueError)


def test_the_step_counter_rule():
    last = (1 << 64) - 2
    assert runspec.can_run(last, 1) and not runspec.can_run(last, 2)
    assert runspec.can_run(last + 1, 0)  # no step: nothing wraps
    with pytest.raises(OptionError, match=r"steps 18446744073709551614 \.\. 18446744073709551615 reach 2\^64-1"):
        runspec.check_can_run(last, 2, 64)
    with pytest.raises(OptionError, match="STEPS_PER_TASK is 0"):
        runspec.check_can_run(0, 1, 0)
    runspec.check_can_run(0, 0, 0)  # train(0) runs nothing: any page will do


def test_the_rule_on_many_pages_names_the_first_bad_system():
    words = np.repeat(np.frombuffer(runspec.init_page(), "<u4")[None, :], 3, axis=0).copy()
    runspec.write_step_base(words, np.array([0, (1 << 64) - 3, 5], np.uint64))
    runspec.check_words_can_run(words, 2)
    with pytest.raises(OptionError, match=r"^system 1: steps"):
        runspec.check_words_can_run(words, 3)
    with pytest.raises(OptionError, match=r"^system 2: steps"):  # page 1 stands for systems 2 and 3
        runspec.check_words_can_run(words, 3, stride=2)


@pytest.mark.parametrize("base", [0, 5, (1 << 32) + 7, (1 << 64) - 2])
def test_writing_a_step_base_is_what_the_view_reads(base):
    words = np.frombuffer(runspec.init_page(), "<u4")[None, :].copy()
    runspec.write_step_base(words, base)
    assert View.from_bytes(words[0].tobytes()).next_step == base == int(runspec.next_steps(words)[0])


@pytest.mark.parametrize(
    ("z", "word", "written"), [(True, 0x00000001, 0), (False, 0x00000001, 1), (True, 0x3F000000, 0x3F000000)]
)
def test_writing_an_lr_is_set_lr(z, word, written):
    words = np.frombuffer(runspec.init_page(), "<u4")[None, :].copy()
    runspec.write_lr(words, np.array([word], np.uint32), z)
    assert words[0, WORD["LR"]] == written  # mode Z flushes a subnormal word, as ftz_from_bits


def test_an_lr_is_a_number_or_an_f32_word_alike():
    assert runspec.lr_word(0.01) == runspec.lr_word(np.uint32(0x3C23D70A)) == runspec.lr_word("0x3c23d70a")
    assert runspec.lr_word(np.float32(0.01)) == runspec.lr_word("0.01") == 0x3C23D70A
    assert runspec.lr_words(np.array([0.01], np.float32)).tolist() == [0x3C23D70A]
    with pytest.raises(OptionError, match="beyond float32's range"):
        runspec.lr_word(1e39)
    with pytest.raises(OptionError, match="beyond float32's range"):
        runspec.lr_word(1 << 128)
    with pytest.raises(TypeError, match="lr is an LR"):
        runspec.lr_word(b"0.5")


def test_an_integer_lr_is_the_number_in_every_form():
    assert runspec.lr_words([1, 2]).tolist() == runspec.lr_words([1.0, 2.0]).tolist()
    assert runspec.lr_words(np.array([1, 2], np.int64)).tolist() == runspec.lr_words([1.0, 2.0]).tolist()
    assert runspec.lr_word(1) == runspec.lr_word(np.int16(1)) == 0x3F800000


@pytest.mark.parametrize("x", [1, 3, 2**24 + 1, 2**24 + 3, 2**53 + 1, 2**62 + 2**38 + 1, -(2**40) - 7, 2**63 - 1])
def test_an_integer_lr_is_rounded_once_as_numpys_int64_cast(x):
    assert runspec.lr_word(x) == int(np.array([x], np.int64).astype(np.float32).view(np.uint32)[0])


def test_the_page_digest_is_spec_11s():
    pages = np.stack([np.frombuffer(ref.init_page(1), "<u4"), np.frombuffer(meshnb.train(7).page, "<u4")])
    got = runspec.page_digests(pages)
    assert [bytes(d).hex() for d in got] == [View.from_bytes(p.tobytes()).digest() for p in pages]


def test_option_error_spells_names_for_the_library_and_the_command_line():
    e = OptionError("{step_base} is bad, give {systems}", "step_base", "systems", library={"systems": "systems=N"})
    assert str(e) == "step_base is bad, give systems=N"
    assert e.for_cli({"systems": "--systems N"}) == "--step-base is bad, give --systems N"


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: meshnb.train("100"), TypeError, "steps must be an integer"),
        (lambda: meshnb.sweep("10"), TypeError, "steps must be an integer"),
        (lambda: meshnb.train(-1), OptionError, "steps must be an integer from 0"),
        (lambda: meshnb.sweep(-1), OptionError, "steps must be an integer from 0"),
        (lambda: meshnb.train(4, step_base=-1), OptionError, "step_base must be 0..2\\^64-2"),
        (lambda: meshnb.sweep(4, step_base=-1), OptionError, "step_base must be 0..2\\^64-2"),
        (lambda: meshnb.train(4, step_base=2.0), TypeError, "step_base must be an integer"),
        (lambda: meshnb.sweep(4, step_base=2.0), TypeError, "step_base must be an integer"),
        (lambda: meshnb.train(4, progress="yes"), TypeError, "progress must be True or False"),
        (lambda: meshnb.sweep(4, progress="yes"), TypeError, "progress must be True or False"),
        (lambda: meshnb.train(3, step_base=(1 << 64) - 3), OptionError, "reach 2\\^64-1"),
        (lambda: meshnb.sweep(3, step_base=(1 << 64) - 3), OptionError, "reach 2\\^64-1"),
        (lambda: meshnb.train(4, timeout_ms=-5), OptionError, "timeout_ms must be a number above 0"),
    ],
)
def test_every_entry_point_gives_the_same_bad_value_the_same_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_numpy_step_count_runs_as_the_int():
    assert meshnb.sweep(np.uint64(4), lrs=[0.5]).digests == meshnb.sweep(4, lrs=[0.5]).digests


def test_describe_is_the_sweeps_model():
    s = runspec.describe(5, lrs=[0.5, 0.25], view_in=[runspec.init_page()] * 3, step_base=[1, 2, 3, 4, 5, 6])
    assert len(s) == 6 and s.page_index(0, 6).tolist() == [0, 0, 1, 1, 2, 2]
    assert s.step_base(0, 6).tolist() == [1, 2, 3, 4, 5, 6]
    w = s.words(2, 4)
    assert runspec.next_steps(w).tolist() == [3, 4] and w[1, WORD["LR"]] == runspec.lr_word(0.25)


def test_check_run_is_the_checkers_question_with_trains_rules():
    assert runspec.check_run(10, 64, 5, [(0, np.uint32(0x3F000000)), (10, 0.25)]) == ((0, 0x3F000000), (10, 0x3E800000))
    with pytest.raises(OptionError, match="set_lr's step must be an integer from 0 to 10, got 11"):
        runspec.check_run(10, 64, 5, {11: 0.5})
    with pytest.raises(OptionError, match="steps_per_task must be an integer from 1"):
        runspec.check_run(10, 0, 5)
    with pytest.raises(TypeError, match="step_base must be an integer"):
        runspec.check_run(10, 64, 5.0)
    with pytest.raises(OptionError, match="reach 2\\^64-1"):
        runspec.check_run(4, 64, (1 << 64) - 4)
    assert runspec.check_run(3, 64, (1 << 64) - 4) == ()


def test_lrs_too_large_for_memory_are_an_option_error_with_the_estimate(monkeypatch):
    """A broadcast view of 10^10 LRs holds no memory, but its words would: numpy's MemoryError
    ("Unable to allocate 37.3 GiB") reached the user; the CLI refused the same size with an estimate."""
    import meshnb

    monkeypatch.setattr(runspec, "available_bytes", lambda: 24 << 30)  # the machines of CI, not this one's size
    huge = np.broadcast_to(np.float32(0.5), (10**10,))
    says = r"^lrs: 10000000000 learning rates needs about 111\.8 GiB, more than this machine has free \(24\.0 GiB\)"
    with pytest.raises(runspec.OptionError, match=says):
        meshnb.sweep(64, lrs=huge)
    monkeypatch.setattr(runspec, "available_bytes", lambda: 1000)
    with pytest.raises(runspec.OptionError, match="sweep fewer at a time"):
        runspec.lr_words(np.full(100, 0.5))
    assert runspec.lr_words(np.full(10, 0.5)).tolist() == [0x3F000000] * 10


# --- the one description of a run (runspec.Run): train and sweep build the same type -----------


def _train_run(**keywords):
    from meshnb.options import RunOptions

    return RunOptions(steps=8, **keywords).describe()


def _sweep_run(**keywords):
    from meshnb.sweeps import SweepOptions

    return SweepOptions(steps=8, **keywords).describe()


def _page(lr_word: int = 0x3E800000) -> bytes:
    view = View.from_bytes(runspec.init_page())
    view.set_word("LR", lr_word)
    return view.tobytes()


@pytest.mark.parametrize("keywords", [{}, {"step_base": 2**40}, {"view_in": _page()}, {"z": False}])
def test_train_and_sweep_describe_one_system_as_the_same_run(keywords):
    one, sweep_one = _train_run(**keywords), _sweep_run(**keywords)
    assert type(one) is type(sweep_one) is runspec.Run
    assert (one.backend, sweep_one.backend) == ("single", "cpu")  # each entry point's backend names
    assert dataclasses.replace(one, backend=None) == dataclasses.replace(sweep_one, backend=None)
    assert len(one) == one.groups == 1 and not one.is_cluster and one.steps == 8
    assert np.array_equal(one.words(0, 1), sweep_one.words(0, 1))
    # the claim can fail: another step base is another run
    assert dataclasses.replace(one, backend=None) != dataclasses.replace(sweep_one, backend=None, base=7)


def test_a_cluster_is_the_case_of_one_group():
    run = _train_run(systems=3, set_lr={4: 0.5}, step_base=5)
    assert (len(run), run.groups, run.group, run.members, run.backend) == (3, 1, 3, 3, "threads")
    assert run.page_index(0, 3).tolist() == [0, 0, 0] and run.lr_index(0, 3).tolist() == [-1, -1, -1]
    assert runspec.next_steps(run.words(0, 3)).tolist() == [5, 5, 5] and run.set_lr == ((4, 0x3F000000),)
    # a group of N per (page, LR) system: lr_index counts groups, not members
    grid = runspec.describe(8, lrs=[0.5, 0.25], view_in=[_page(), _page()], group=2)
    assert len(grid) == 8 and grid.groups == 4
    assert grid.page_index(0, 8).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert grid.lr_index(0, 8).tolist() == [0, 0, 1, 1, 0, 0, 1, 1]


def test_the_checkpoint_header_and_a_cluster_start_read_the_run():
    from meshnb.checkpoint import RunSettings
    from meshnb.options import RunOptions, resolve

    opts = RunOptions(steps=64, systems=2, set_lr={0: 0.25}, steps_per_task=16, step_base=3)
    start = resolve(opts)
    assert start.run == opts.describe() and start.whole == opts.describe().plan()
    want = RunSettings(2, 64, 16, ((0, 0x3E800000),), 3, True, 3)
    assert start.settings(3) == RunSettings.of(opts.describe(), 3) == want
    mpi = resolve(RunOptions(steps=8, backend="mpi"), 5)  # the job's size, once known
    assert mpi.run is not None and (mpi.run.group, len(mpi.run)) == (5, 5)
    with pytest.raises(ValueError, match="not 2 systems alone"):
        RunSettings.of(runspec.describe(8, lrs=[0.5, 0.25]), 0)


@pytest.mark.parametrize(
    ("keywords", "error", "message"),
    [
        ({"steps": -1}, OptionError, "steps must be an integer from 0 to 9223372036854775807, got -1"),
        ({"steps": "8"}, TypeError, "steps must be an integer from 0 to 9223372036854775807, got str '8'"),
        ({"step_base": 2**64 - 1}, OptionError, "step_base must be 0..2^64-2, got 18446744073709551615"),
        ({"view_in": b"0123456789"}, OptionError, "view_in has 10 bytes, a page is 4096 bytes"),
        ({"z": "no"}, TypeError, "z must be True or False, got str 'no'"),
        ({"step_base": 2**64 - 3}, OptionError, "system 0: steps 18446744073709551613 .. 18446744073709551620 reach"),
    ],
)
def test_a_bad_value_is_refused_with_the_same_message_by_train_and_sweep(keywords, error, message):
    keywords = {"steps": 8, **keywords}
    from meshnb.options import RunOptions
    from meshnb.sweeps import SweepOptions

    answers = []
    for call in (
        lambda: RunOptions(**keywords),
        lambda: SweepOptions(**keywords).describe(),
        lambda: meshnb.train(**keywords),
        lambda: meshnb.sweep(**keywords),
    ):
        with pytest.raises(error) as e:
            call()
        answers.append(str(e.value))
    assert answers == [answers[0]] * 4 and answers[0].startswith(message), answers


@pytest.mark.parametrize("rule", ["check_steps_per_task", "check_step_base", "lr_changes", "start_page"])
def test_trains_options_check_each_value_once(monkeypatch, rule):
    """A fresh run's values are checked by describe alone (RunOptions checked them, then describe again)."""
    import sys

    from meshnb.options import RunOptions

    calls = []
    real = getattr(runspec, rule)
    users = [m for name, m in sys.modules.items() if name.startswith("meshnb") and getattr(m, rule, None) is real]
    for module in users:
        monkeypatch.setattr(module, rule, lambda *a, **k: calls.append(a) or real(*a, **k))  # wherever imported
    RunOptions(steps=8, steps_per_task=4, step_base=9, set_lr={0: 0.5}, view_in=runspec.init_page())
    assert len(calls) == 1, calls


def test_a_sweep_run_holds_arrays_not_an_object_per_system():
    run = runspec.describe(8, lrs=np.full(10**6, 0.5), step_base=np.arange(10**6))
    assert len(run) == 10**6 and run.starts.shape == (1, 1024)
    assert isinstance(run.lr, np.ndarray) and isinstance(run.base, np.ndarray) and run.base.dtype == np.uint64
    with pytest.raises(ValueError, match="one step base"):
        run.plan()


def test_lr_words_and_step_bases_by_their_rules():
    with pytest.raises(OptionError, match=r"^step_base must be one integer or one per system \(3\), got 2$"):
        runspec.step_bases([0, 1], 3)
    assert hex(runspec.parse_lr("0.01")) == hex(runspec.parse_lr("0x3c23d70a")) == "0x3c23d70a"
    assert (hex(runspec.lr_word(1)), hex(runspec.lr_word("0x1"))) == ("0x3f800000", "0x1")  # the number 1, the word 1
    assert runspec.lr_changes({50: 0.25, 0: np.uint32(0x3F000000)}, 100) == ((0, 0x3F000000), (50, 0x3E800000))
