"""``run``'s argv split: our options first, then the user's command untouched."""

import pytest
from torchpar_top.args import parse, run_parser, split_run
from torchpar_top.sources.live.targets import ExperimentTarget


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train.py"], ([], "train.py", False, [])),
        (
            ["--sync", "train.py", "--lr", "0.1", "-m", "x"],
            (["--sync"], "train.py", False, ["--lr", "0.1", "-m", "x"]),
        ),
        (
            ["--interval", "0.5", "-m", "pkg.mod", "--sync"],
            (["--interval", "0.5"], "pkg.mod", True, ["--sync"]),
        ),
        (["--nproc-per-node", "2", "ddp.py", "10"], (["--nproc-per-node", "2"], "ddp.py", False, ["10"])),
        (["--sync"], (["--sync"], None, False, [])),
        (["-m"], ([], None, True, [])),
        (["--sync", "-m"], (["--sync"], None, True, [])),
        (["--", "x.py", "--sync"], ([], "x.py", False, ["--sync"])),
        (["--sync", "--", "-odd-name.py"], (["--sync"], "-odd-name.py", False, [])),
        (["--"], ([], None, False, [])),
    ],
)
def test_split_run(argv, expected):
    assert split_run(argv) == expected


def test_run_options_parse():
    args = run_parser().parse_args(["--sync", "--sync-scope", "step", "--nproc-per-node", "2"])
    assert args.sync and args.sync_scope == "step" and args.nproc_per_node == 2


def test_an_experiment_restarted_with_a_thread_count_passes_it_to_the_child():
    plain = ExperimentTarget("inter-op").command(7, 0.1, False)
    assert "--threads" not in plain
    again = ExperimentTarget("inter-op", threads=1).command(7, 0.1, True)
    assert again[again.index("--threads") + 1] == "1" and again[-1] == "--sync"


def test_an_experiment_takes_a_torchrun_log_folder_as_a_script_does_and_never_uses_it():
    # the session gives every target's command the listener's log folder (None without torchrun)
    plain = ExperimentTarget("inter-op").command(7, 0.1, False)
    assert ExperimentTarget("inter-op").command(7, 0.1, False, log_dir="/x/logs") == plain


def test_run_samples_at_5_hz_by_default_and_everything_else_at_10():
    # the agent's samples run inside the user's code: run takes half as many (issue 18's cost goals)
    assert parse(["run", "train.py"]).interval == 0.2
    assert parse([]).interval == 0.1
    assert parse(["attach", "123"]).interval == 0.1
    assert parse(["run", "--interval", "0.1", "train.py"]).interval == 0.1


@pytest.mark.parametrize("text", ["0.02", "0.1", "60"])
def test_intervals_in_range_are_accepted(text):
    assert run_parser().parse_args(["--interval", text]).interval == float(text)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("inf", "finite"),
        ("1e-9", "between 0.02 and 60"),
        ("61", "between 0.02 and 60"),
        ("nan", "greater than 0"),
        ("0", "greater than 0"),
    ],
)
def test_intervals_out_of_range_are_one_line_and_status_2(text, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        run_parser().parse_args(["--interval", text])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("torchpar-top: error:") and needle in err[0]


@pytest.mark.parametrize(
    "argv, line",
    [
        (["replay", "x", "--bogus"], "unrecognized arguments: --bogus (see torchpar-top replay --help)"),
        (["frob"], "argument COMMAND: invalid choice: 'frob'"),
        (["--sync", "attach", "1"], "options before attach belong to the built-in experiment"),
        (["export"], "the following arguments are required: FILE (see torchpar-top export --help)"),
    ],
)
def test_one_parser_one_error_line(argv, line, capsys):
    from torchpar_top.args import parse

    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("torchpar-top: error: ") and line in err[0]


def test_subcommands_parse_into_one_namespace_shape():
    from torchpar_top.args import COMMANDS, build_parser, parse

    assert tuple(build_parser().commands) == COMMANDS
    bare = parse(["-e", "inter-op", "--headless", "--duration", "3"])
    assert bare.command is None and bare.experiment == "inter-op" and bare.duration == 3
    run = parse(["run", "--sync", "train.py", "--sync", "-m", "x"])
    assert (run.command, run.sync, run.target, run.module, run.target_args) == (
        "run",
        True,
        "train.py",
        False,
        ["--sync", "-m", "x"],
    )
    # unique in compare, ambiguous against the experiment's --metrics-port/--metrics-addr
    assert parse(["compare", "a.json", "b.json", "--metric", "cpu_load"]).metric == "cpu_load"


@pytest.mark.parametrize("option", ["--cupti-duty", "--metrics-addr", "--sync-scope"])
def test_every_option_that_takes_a_value_takes_it_after_a_space(option):
    """``--cupti-duty 0.5 train.py`` took 0.5 for the script."""
    value = {"--cupti-duty": "0.5", "--metrics-addr": "0.0.0.0", "--sync-scope": "step"}[option]
    ours, script, _, user = split_run([option, value, "train.py", "--lr", "1"])
    assert (ours, script, user) == ([option, value], "train.py", ["--lr", "1"])
    assert run_parser().parse_args(ours) is not None


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--interval", "1e-5"], "between 0.02 and 60"),  # ZeroDivisionError
        (["--interval", "1e308"], "between 0.02 and 60"),  # OverflowError
        (["--interval", "nan"], "greater than 0"),
    ],
)
def test_replay_interval_has_the_live_modes_bounds(argv, needle, capsys):
    from torchpar_top.args import parse

    with pytest.raises(SystemExit) as exc:
        parse(["replay", "trace.json", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and needle in err[0], err


def test_more_ranks_than_memory_holds_are_refused_with_the_reason(capsys):
    with pytest.raises(SystemExit) as exc:
        run_parser().parse_args(["--nproc-per-node", "100000"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert (
        exc.value.code == 2 and "100000 ranks need at least" in line and "GiB" in line and "at most" in line
    )


def test_more_ranks_than_cores_are_a_warning(monkeypatch):
    from torchpar_top.args import nproc_warning

    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert nproc_warning(None) == "" and nproc_warning(4) == ""
    assert nproc_warning(5).startswith("--nproc-per-node 5 on 4 cores: the ranks take turns")
    assert run_parser().parse_args(["--nproc-per-node", "5"]).nproc_per_node == 5


def test_a_second_ctrl_c_while_the_first_unwinds_is_ignored_not_a_traceback(monkeypatch):
    """The second Ctrl-C can land inside the call that ignores Ctrl-C: asked again, it holds."""
    import signal

    from torchpar_top import main as main_module

    real = signal.signal
    calls = []

    def interrupted_once(signum, handler):
        calls.append(handler)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the second Ctrl-C, delivered inside signal.signal
        return real(signum, handler)

    previous = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(main_module.signal, "signal", interrupted_once)
    try:
        main_module._ignore_interrupts()
        assert calls == [signal.SIG_IGN, signal.SIG_IGN]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        real(signal.SIGINT, previous)
