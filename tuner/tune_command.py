"""The bare `autotune` command's run: every target of the options tuned one after the other,
each failure one line with its exit code, Ctrl-C / SIGTERM ending the run at once."""

from __future__ import annotations

import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import click
import optuna

from tuner.console import TuneConsole
from tuner.duration import Duration
from tuner.errors import EXIT_INTERRUPTED, EXIT_NOT_TUNED, EXIT_OK, TunerError, one_line, worst
from tuner.mix_run import tune_mix
from tuner.mix_spec import TrafficMix
from tuner.model_run import tune_model
from tuner.pipeline_run import tune_pipeline
from tuner.plan import Target, plan, plan_mix
from tuner.report import render_run_report
from tuner.run import Hooks, TuneOptions
from tuner.search_types import ProgressEvent


class _StopRequest:
    """Set by SIGTERM. The interrupt it raises can still be lost (a cancelled task that ends
    normally does not re-raise it), so the run also checks this between trials."""

    requested = False

    @classmethod
    def check(cls) -> None:
        if cls.requested:
            raise KeyboardInterrupt


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Unwind like Ctrl-C: the search marks the running trial, the tuning server is stopped.

    Through SIGINT's handler: while the analyzer's event loop runs, that handler cancels the
    loop's task and KeyboardInterrupt follows once it has unwound; raised here instead, it
    could land in one of the loop's callbacks, which would swallow it."""
    _StopRequest.requested = True
    if callable(signal.getsignal(signal.SIGINT)):
        signal.raise_signal(signal.SIGINT)
    else:  # SIGINT ignored (started in the background): interrupt here
        raise KeyboardInterrupt


def run_tuning(options: TuneOptions, traffic_mix: TrafficMix | None = None) -> int:
    """Tune every target of `options` (`tuner.plan.plan`: each ensemble as a pipeline, each
    model no ensemble uses on its own), one after the other, and return the exit code.

    A target that fails (any `TunerError`, or an unexpected exception) is reported in one line
    and the run goes on with the next one; one the tuner cannot tune is skipped with the
    reason (a failure only when it was asked for by name); the exit code is the most severe
    of the targets' (`tuner.errors.worst`). Ctrl-C or SIGTERM stops the run at once (130)."""
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the console says what matters
    try:
        if traffic_mix is not None:
            targets = [plan_mix(options.repository, traffic_mix.shares)]
        else:
            targets = plan(options.repository, options.models)
    except Exception as exc:
        message, code = failure(exc, options.report_dir)
        click.echo(f"error: {message}", err=True)
        return code
    started = time.monotonic()
    exit_code = EXIT_OK
    with TuneConsole() as console:
        _announce(targets, console)
        skipped = [t for t in targets if t.skip]
        if options.models and skipped:
            exit_code = EXIT_NOT_TUNED
        targets = [t for t in targets if not t.skip]
        for index, target in enumerate(targets):
            share = None
            if options.time_budget is not None:
                left = options.time_budget.s - (time.monotonic() - started)
                share = Duration.from_s(max(left, 0.0) / (len(targets) - index))
            try:
                code = _tune_one(options, target, share, console)
                _StopRequest.check()
            except KeyboardInterrupt:
                console.warning("interrupted: the study is kept and resumes next run")
                return EXIT_INTERRUPTED
            exit_code = worst(exit_code, code)
    return exit_code


def _announce(targets: list[Target], console: TuneConsole) -> None:
    """What the run tunes: the pipelines (with their steps), the models alone, the skipped."""
    pipelines = [t for t in targets if t.kind == "pipeline" and not t.skip]
    models = [t.name for t in targets if t.kind == "model" and not t.skip]
    for target in pipelines:
        console.note(f"pipeline '{target.name}': {' -> '.join(target.steps)} (tuned jointly)")
    if models and pipelines:
        console.note(f"models no ensemble uses, tuned on their own: {', '.join(models)}")
    for target in targets:
        if target.skip:
            console.warning(f"skipping '{target.name}': {target.skip}")


def _tune_one(
    options: TuneOptions, target: Target, share: Duration | None, console: TuneConsole
) -> int:
    """Tune one target, print how it ended and return its exit code; errors become one line."""
    name = target.name
    hooks = Hooks(console.note, _stoppable(console))
    try:
        if share is not None and share.us <= 0:
            raise TunerError("the time budget was spent before its turn")
        if target.kind == "mix":
            summary = tune_mix(options, target, share, hooks)
        elif target.kind == "pipeline":
            summary = tune_pipeline(options, target, share, hooks)
        else:
            summary = tune_model(options, name, share, hooks)
    except Exception as exc:
        message, code = failure(exc, options.report_dir / name)
        console.error(f"'{name}' could not be tuned: {message}")
        return code
    console.summary(summary)
    try:
        console.note(f"report: {render_run_report(options.report_dir)}")
    except (TunerError, OSError) as exc:  # the run's own report folder: the run failed
        console.error(f"the HTML report could not be written: {one_line(exc)}")
        return worst(summary.exit_code, EXIT_NOT_TUNED)
    return summary.exit_code


def _stoppable(console: TuneConsole) -> Callable[[str, ProgressEvent], None]:
    """The console's progress hook, which also ends the run between trials once a stop was
    asked for."""

    def progress(model: str, event: ProgressEvent) -> None:
        console.update(model, event)
        _StopRequest.check()

    return progress


def failure(error: Exception, folder: Path) -> tuple[str, int]:
    """The one place an error becomes the line and the exit code it ends a model (or the run)
    with: a `TunerError` gives its message and its own exit code; anything else is a bug,
    named by its type, its traceback kept in `folder`/error.log, exit code 1."""
    if isinstance(error, TunerError):
        return one_line(error), error.exit_code
    kept = _keep_traceback(folder)
    return (
        f"unexpected {type(error).__name__}: {one_line(error)} (traceback in {kept})",
        EXIT_NOT_TUNED,
    )


def _keep_traceback(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "error.log"
    path.write_text(traceback.format_exc())
    return path
