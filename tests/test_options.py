"""The options table: parsing of the command line's text, the checks made when options are made,
the names errors use (the library's keywords, the command line's flags), and the task plan."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from meshnb.options import (
    MASK32,
    OptionError,
    Plan,
    RunOptions,
    arg_type,
    option_fields,
    parse_count,
    parse_hex_u32,
    parse_positive,
    resolve,
)


@pytest.mark.parametrize(
    ("parse", "text", "value"),
    [
        (parse_count, "0", 0),
        (parse_count, "4096", 4096),
        (parse_hex_u32, "3f000000", 0x3F000000),
        (parse_hex_u32, "FFFFFFFF", MASK32),
        (parse_positive, "0.5", 0.5),
        (parse_positive, "1e3", 1000.0),
    ],
)
def test_parsers_take_what_they_should(parse, text, value):
    assert parse(text) == value


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_count, "-1", "negative"),
        (parse_count, "1.5", "whole number"),
        (parse_count, "1e3", "whole number"),
        (parse_hex_u32, "100000000", "u32"),
        (parse_hex_u32, "-1", "u32"),
        (parse_hex_u32, "zz", "not hex"),
        (parse_positive, "0", "positive"),
        (parse_positive, "nan", "positive"),
        (parse_positive, "inf", "positive"),
        (parse_positive, "x", "not a number"),
    ],
)
def test_parsers_refuse_with_a_message(parse, text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)


def test_arg_type_keeps_the_parsers_message_for_argparse():
    with pytest.raises(argparse.ArgumentTypeError, match="negative"):
        arg_type(parse_count)("-3")


def test_an_option_error_names_the_option_as_the_caller_spelled_it():
    with pytest.raises(OptionError) as e:
        RunOptions(stalls=((0, 0, 5),))  # a cluster option without a cluster
    assert "stalls" in str(e.value) and "systems=N" in str(e.value)
    assert "--stall" in e.value.for_cli() and "--systems N" in e.value.for_cli()


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"systems": 0}, "systems must be an integer from 1 to 64, got 0"),
        ({"systems": 65}, "systems must be an integer from 1 to 64, got 65"),
        ({"systems": 2, "timeout_ms": 0}, "above 0"),
        ({"systems": 2, "give_up_s": float("nan")}, "above 0"),
        ({"systems": 2, "stalls": ((2, 0, 1),)}, "names system 2"),
        ({"systems": 2, "stalls": ((0, 0),)}, "three non-negative integers"),
        ({"systems": 2, "backend": "fused", "stalls": ((0, 0, 1),)}, "no exchange"),
        ({"systems": 2, "backend": "gpu"}, "backend must be one of"),
        ({"backend": "processes"}, "is for clusters"),
        ({"systems": 2, "steps": -1}, "steps must be an integer from 0 to"),
        ({"timeout_ms": -5}, "timeout_ms must be a number above 0"),  # one system: the same answer as a cluster's
    ],
)
def test_bad_options_are_refused_when_made(keywords, message):
    with pytest.raises(OptionError, match=message):
        RunOptions(**keywords)


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"systems": True}, "systems must be an integer"),  # bool is no integer
        ({"systems": 2.0}, "systems must be an integer"),
        ({"steps": "100"}, "steps must be an integer"),
        ({"progress": "yes"}, "progress must be True or False"),
        ({"view_in": 5}, "view_in is a page"),
        ({"backend": 3}, "backend is a name"),
    ],
)
def test_wrong_types_are_type_errors(keywords, message):
    with pytest.raises(TypeError, match=message):
        RunOptions(**keywords)


def test_a_numpy_integer_is_an_integer_and_messages_show_it_plainly():
    assert RunOptions(systems=np.int64(2)).systems == 2 and type(RunOptions(systems=np.int64(2)).systems) is int
    with pytest.raises(OptionError, match=r"got 70$"):
        RunOptions(systems=np.int64(70))


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"steps": -1}, "steps must be an integer from 0"),
        ({"steps_per_task": 0}, "steps_per_task must be an integer from 1"),
        ({"step_base": 2**64 - 1}, "step_base must be 0..2\\^64-2"),
        ({"set_lr": {5: 0.5}, "steps": 4}, "set_lr's step must be an integer from 0 to 4, got 5"),
        ({"set_lr": {0: "0x100000000"}}, "an f32 word has at most 8 hex digits"),
        ({"set_lr": {0: 1e39}}, "beyond float32's range"),
    ],
)
def test_a_bad_plan_is_refused_before_any_step(keywords, message):
    with pytest.raises(OptionError, match=message):
        RunOptions(**keywords).plan()


def test_unknown_keywords_are_named():
    with pytest.raises(OptionError, match="'lr'"):
        RunOptions.from_keywords(10, lr=0.1)


def test_a_run_without_systems_is_one_system_alone():
    assert RunOptions().backend_name == "single" and not RunOptions().is_cluster
    assert RunOptions(systems=1).backend_name == "threads"
    assert RunOptions(backend="mpi").is_cluster  # every rank of a job is a member
    assert RunOptions(backend="cuda").backend_name == "cuda"  # a backend that also runs one system alone


@pytest.mark.parametrize("backend", ["threads", "processes", "fused"])
def test_a_cluster_backend_named_without_systems_is_refused(backend):
    with pytest.raises(OptionError, match="is for clusters"):
        RunOptions(backend=backend)


def test_an_lr_change_takes_a_number_or_an_f32_word_alike():
    word = RunOptions(set_lr={0: np.uint32(0x3C23D70A)}).set_lr
    assert (
        RunOptions(set_lr={0: 0.01}).set_lr == word == RunOptions(set_lr={0: "0x3c23d70a"}).set_lr == ((0, 0x3C23D70A),)
    )
    assert RunOptions(set_lr={0: np.float32(0.5)}).set_lr == ((0, 0x3F000000),)


def test_set_lr_is_normalised_in_order_given_per_step():
    w = np.uint32
    opts = RunOptions(set_lr=[(8, w(2)), (0, w(1)), (8, w(3))])
    assert opts.set_lr == ((0, 1), (8, 2), (8, 3))  # stable: the last change at a step wins
    assert opts.plan().lr_changes_at(8) == [2, 3]


def test_plan_boundaries_stop_where_an_lr_change_must_start_a_task():
    plan = Plan.make(200, None, {100: 1.0, 150: 2.0})
    assert [plan.next_boundary(64, d) for d in (0, 64, 100, 128, 150)] == [64, 100, 150, 150, 200]


def test_resolve_starts_a_fresh_cluster_from_the_whole_plan():
    start = resolve(RunOptions(steps=300, systems=3, steps_per_task=7, step_base=5))
    assert start.systems == 3 and start.done_before == 0 and start.checkpoint is None
    assert start.whole is not None and (start.whole.steps_per_task, start.whole.step_base) == (7, 5)
    assert start.plan.steps == 300 and start.plan.step_base is None  # the pages carry them once prepared


def test_every_option_has_help_and_every_flag_a_parser_or_is_a_switch():
    for name, _, flag in option_fields():
        assert flag.help, name
        if flag.flag is not None:
            assert flag.flag.startswith("--"), name


def test_the_options_backend_names_are_the_registrys():
    from meshnb.backends import BACKENDS
    from meshnb.options import ALONE_BACKENDS, CLUSTER_BACKENDS

    assert set(BACKENDS) == {"single", *CLUSTER_BACKENDS}
    assert set(ALONE_BACKENDS) <= set(CLUSTER_BACKENDS)


def test_small_parsers_and_checks_of_the_options():
    from meshnb.options import add_flags, check_stalls, given_options, option_error, parse_hex_u32, parse_step_base

    assert (hex(parse_hex_u32("3f000000")), parse_hex_u32("0x1"), parse_hex_u32("0xFFFFFFFF")) == (
        "0x3f000000",
        1,
        2**32 - 1,
    )
    with pytest.raises(ValueError, match=r"^--lr-word: '100000000' is not a u32 in hex$"):
        parse_hex_u32("100000000", "--lr-word")
    with pytest.raises(ValueError, match=r"^'x' is not a number$"):
        parse_positive("x")
    assert parse_step_base("4294967296") == parse_step_base("0x100000000") == 1 << 32
    e = option_error("{backend} needs {systems}", "backend", "systems")
    assert (str(e), e.for_cli()) == ("backend needs systems=N", "--backend needs --systems N")
    assert check_stalls([[1, 0, 50]], 2) == ((1, 0, 50),)
    with pytest.raises(OptionError, match=r"^a stall names system 2, but the cluster has systems 0 to 1$"):
        check_stalls([(2, 0, 50)], 2)
    parser = argparse.ArgumentParser(prog="meshnb train")
    add_flags(parser, option_fields())
    assert given_options(parser.parse_args(["--steps", "100", "--ieee"]), option_fields()) == {"steps": 100, "z": False}
    assert given_options(parser.parse_args([]), option_fields()) == {}
