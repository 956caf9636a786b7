"""The tuner CLI: durations reach the run as `Duration`s; errors end as one line each with a
documented exit code, and one failing model does not stop the others."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import click
import click.testing
import pytest

from tuner.budget import LatencyBudget
from tuner.cli import main
from tuner.cli_params import DurationParam
from tuner.duration import Duration
from tuner.errors import (
    EXIT_NO_FEASIBLE,
    EXIT_NOT_TUNED,
    EXIT_OK,
    EXIT_USAGE,
    ReportError,
    TunerError,
    TuneUsageError,
    worst,
)
from tuner.precision import PrecisionError
from tuner.run import TuneError, TuneOptions, study_name
from tuner.search_types import SearchError
from tuner.server_control import ServerError, TuningServer
from tuner.tune_command import run_tuning


def _params(*args: str) -> dict[str, object]:
    with main.make_context("autotune", ["--latency-p95", "10ms", *args]) as ctx:
        return dict(ctx.params)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10m", 600.0), ("600s", 600.0), ("90", 90.0), ("1.5h", 5400.0), ("2 min", 120.0)],
)
def test_time_budget_is_seconds(text: str, seconds: float) -> None:
    budget = _params("--time-budget", text)["time_budget"]
    assert isinstance(budget, Duration) and budget.s == pytest.approx(seconds)


def test_latency_budgets_are_durations() -> None:
    assert _params()["latency_p95"] == Duration.from_ms(10)
    assert _params("--latency-p99", "1.5s")["latency_p99"] == Duration(1_500_000.0)


@pytest.mark.parametrize("text", ["10 parsecs", "0m", "-1s", "10ms", "m"])
def test_bad_time_budgets_are_usage_errors_naming_the_value(text: str) -> None:
    with pytest.raises(click.BadParameter) as caught:
        _params("--time-budget", text)
    assert f"'{text}'" in str(caught.value)
    assert "10m" in str(caught.value)


def test_latency_budgets_take_no_minutes_and_need_a_unit() -> None:
    for text in ("10m", "10"):
        with pytest.raises(click.BadParameter, match=f"'{text}'"):
            _params("--latency-p90", text)


def test_one_duration_type_serves_both_kinds() -> None:
    assert Duration.parse("10m", "wall_clock").s == 600.0
    assert Duration.parse("1.5s", "latency").us == 1_500_000.0
    assert Duration.parse("1.5s").ms == 1_500.0
    assert DurationParam("wall_clock").convert("1h", None, None) == Duration.from_s(3600)
    assert str(Duration(1500)) == "1.5 ms" and str(Duration.from_s(90)) == "90 s"
    assert str(Duration(250)) == "250 us"
    assert Duration.from_s(2).minus(Duration.from_s(3)) == Duration(0)
    with pytest.raises(ValueError, match="not negative"):
        Duration(-1)
    with pytest.raises(ValueError, match="kind"):
        DurationParam("ms")  # type: ignore[arg-type]


# -- errors ---------------------------------------------------------------------------------------


def test_the_worst_exit_code_wins() -> None:
    assert worst(EXIT_OK) == EXIT_OK
    assert worst(EXIT_OK, EXIT_NO_FEASIBLE, EXIT_OK) == EXIT_NO_FEASIBLE
    assert worst(EXIT_NO_FEASIBLE, EXIT_NOT_TUNED, EXIT_OK) == EXIT_NOT_TUNED
    assert worst(EXIT_NOT_TUNED, EXIT_USAGE) == EXIT_USAGE


def test_tuner_errors_carry_their_exit_codes() -> None:
    for error in (TuneError, SearchError, ServerError, PrecisionError):
        assert issubclass(error, TunerError) and error.exit_code == EXIT_NOT_TUNED
    assert TuneUsageError.exit_code == EXIT_USAGE
    assert ReportError.exit_code == EXIT_USAGE  # `autotune report` given the wrong folder


def test_every_tuner_exception_derives_from_the_one_base() -> None:
    """Each exception class of tuner/ is a TunerError, so the CLI maps it in one place."""
    import importlib
    import inspect
    import pkgutil

    import tuner

    found = []
    for info in pkgutil.walk_packages(tuner.__path__, "tuner."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, BaseException):
                found.append(cls)
    assert found, "the walk found the tuner's errors"
    assert [c.__qualname__ for c in found if not issubclass(c, TunerError)] == []


def test_each_failing_model_is_one_line_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("a_server", "b_bug", "c_study"):
        (tmp_path / "repo" / name).mkdir(parents=True)
    failures: dict[str, Exception] = {
        "a_server": ServerError("the tuning server did not start:\nTraceback (most recent...)\nX"),
        "b_bug": KeyError("nobody expected this"),
        "c_study": SearchError("study 'c' was made for another objective"),
    }
    tried: list[str] = []

    def failing(options: TuneOptions, model: str, *_: object) -> NoReturn:
        tried.append(model)
        raise failures[model]

    monkeypatch.setattr("tuner.tune_command.tune_model", failing)
    options = TuneOptions(
        repository=tmp_path / "repo",
        budget=LatencyBudget(95, Duration.from_ms(10)),
        report_dir=tmp_path / "reports",
    )
    assert run_tuning(options) == EXIT_NOT_TUNED
    assert tried == ["a_server", "b_bug", "c_study"]
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert errors == [
        "error: 'a_server' could not be tuned: the tuning server did not start: | "
        "Traceback (most recent...) | X",
        "error: 'b_bug' could not be tuned: unexpected KeyError: 'nobody expected this' "
        f"(traceback in {tmp_path / 'reports' / 'b_bug' / 'error.log'})",
        "error: 'c_study' could not be tuned: study 'c' was made for another objective",
    ]
    assert "KeyError" in (tmp_path / "reports" / "b_bug" / "error.log").read_text()


def test_a_missing_repository_or_model_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    budget = LatencyBudget(95, Duration.from_ms(10))
    assert run_tuning(TuneOptions(repository=tmp_path / "none", budget=budget)) == EXIT_USAGE
    (tmp_path / "repo" / "digits").mkdir(parents=True)
    options = TuneOptions(repository=tmp_path / "repo", budget=budget, models=("resnet",))
    assert run_tuning(options) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"error: model repository {tmp_path / 'none'} is not a directory" in err
    assert "error: no model 'resnet' in" in err and "(models: digits)" in err


def test_a_tuning_server_that_does_not_start_is_one_line_and_keeps_its_log(
    tmp_path: Path,
) -> None:
    model_dir = tmp_path / "repo" / "m"
    (model_dir / "1").mkdir(parents=True)
    kept = tmp_path / "reports" / "m" / "server-start.log"
    server = TuningServer(model_dir, tmp_path, startup_timeout_s=0.0, failure_log=kept)
    with pytest.raises(ServerError) as caught:
        server.start()  # no time to start: stopped again at once
    message = str(caught.value)
    assert message.startswith("the tuning server did not start: ")
    assert f"(its log: {kept})" in message and "\n" not in message
    assert kept.is_file()
    assert not any(tmp_path.glob("scratch-*")), "the scratch folder is removed"


def test_models_whose_turn_comes_after_the_time_budget_are_not_tuned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("a", "b"):
        (tmp_path / "repo" / name).mkdir(parents=True)

    def never(*_: object) -> NoReturn:
        raise AssertionError("no time was left to tune")

    monkeypatch.setattr("tuner.tune_command.tune_model", never)
    options = TuneOptions(
        repository=tmp_path / "repo",
        budget=LatencyBudget(95, Duration.from_ms(10)),
        time_budget=Duration(1e-3),  # spent before the first model's turn
        report_dir=tmp_path / "reports",
    )
    assert run_tuning(options) == EXIT_NOT_TUNED
    err = capsys.readouterr().err
    for name in ("a", "b"):
        assert f"error: '{name}' could not be tuned: the time budget was spent" in err


def test_default_study_names_follow_the_model_and_config_a_user_name_stays() -> None:
    options = TuneOptions(repository=Path("repo"), budget=LatencyBudget(95, Duration.from_ms(50)))
    as_shipped = {"model_sha256": "aa", "base_config": "11"}
    rewritten = {"model_sha256": "aa", "base_config": "22"}
    name = study_name(options, "digits", as_shipped)
    assert name.startswith("digits-p95-50000us-climb-")
    assert study_name(options, "digits", dict(as_shipped)) == name  # the same run resumes
    assert study_name(options, "digits", rewritten) != name  # a written-back config starts anew
    named = TuneOptions(repository=Path("repo"), budget=options.budget, study_name="mine")
    assert study_name(named, "digits", rewritten) == "mine-digits"


def test_a_sigterm_whose_interrupt_is_lost_still_stops_the_run_at_the_next_trial() -> None:
    import signal

    from tuner import tune_command as tuner_cli

    events: list[str] = []

    class Console:
        def update(self, model: str, event: object) -> None:
            events.append(model)

    progress = tuner_cli._stoppable(Console())  # type: ignore[arg-type]
    progress("digits", object())  # type: ignore[arg-type]
    try:
        # The interrupt SIGTERM raises can be swallowed (a cancelled task that ends normally):
        # here it is caught, as if lost, and the next progress event must still stop the run.
        with pytest.raises(KeyboardInterrupt):
            tuner_cli._stop_on_sigterm(signal.SIGTERM, None)
        with pytest.raises(KeyboardInterrupt):
            progress("digits", object())  # type: ignore[arg-type]
    finally:
        tuner_cli._StopRequest.requested = False
    assert events == ["digits", "digits"]


def _invoke(*args: str) -> click.testing.Result:
    return click.testing.CliRunner().invoke(main, list(args), prog_name="autotune")


def test_tuning_flags_without_a_budget_are_a_usage_error_not_help() -> None:
    """A CI script that forgot the budget must fail, not pass on the help text."""
    forgot = _invoke("-m", "x", "--trials", "20")
    assert forgot.exit_code == EXIT_USAGE, forgot.output
    assert "tuning needs a latency budget: --latency-p95" in forgot.output
    bare = _invoke()
    assert bare.exit_code == EXIT_OK and "Usage: autotune" in bare.output


def test_tuning_flags_before_a_subcommand_are_refused_naming_them() -> None:
    result = _invoke("--trials", "20", "-m", "x", "report", "--help")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "--model, --trials: tuning flags, which do nothing for `autotune report`" in (
        result.output
    )
    assert _invoke("report", "--help").exit_code == EXIT_OK


def test_the_default_search_is_called_what_it_is_and_optuna_is_its_old_name() -> None:
    assert _params()["search"] == "climb"
    result = _invoke("--latency-p95", "10ms", "--search", "optuna", "--model-repository", "/x")
    assert "--search optuna is an old name of climb" in result.output


def test_every_flag_of_the_bare_command_says_what_it_does() -> None:
    missing = [p.name for p in main.params if isinstance(p, click.Option) and not p.help]
    assert missing == []
