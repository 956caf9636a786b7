"""`autotune report RUN_DIR`: render a tuning run's HTML report and print its summary."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from tuner.errors import EXIT_USAGE, ReportError, one_line
from tuner.report.console import print_run
from tuner.report.render import REPORT_FILE, write_run_report
from tuner.report.summary import load_run


@click.command("report", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"HTML file to write [default: RUN_DIR/{REPORT_FILE}].",
)
def report_command(run_dir: Path, output: Path | None) -> None:
    """Render a tuning run as one HTML file and print its summary.

    RUN_DIR is the run's --report-dir (one folder per model, as the tuner writes it) or one
    model's folder. The HTML file opens offline (plotly.js is inlined): per model, the
    configuration as written vs the best, with the changed fields, throughput against latency with
    the budget and the Pareto front, the optimization history, the parameter importances,
    the latency breakdown, the precision variants' accuracy and every trial. Exits 2 when
    RUN_DIR holds no tuning summary.
    """
    try:
        summaries = load_run(run_dir)
        path = write_run_report(summaries, run_dir, output)
    except ReportError as exc:
        click.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # the report cannot be written where it was asked for
        click.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(EXIT_USAGE)
    console = Console(highlight=False)
    print_run([s.run for s in summaries], console)
    console.print(f"report: {path}")
