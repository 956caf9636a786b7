"""The `autotune` command: serve, and (in later issues) perf, tune, report and gate."""

from __future__ import annotations

import click

from analyzer.cli import perf_command
from serve.cli import serve_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="autotune")
def main() -> None:
    """Serve Triton model repositories and tune their configurations."""


main.add_command(serve_command)
main.add_command(perf_command)
