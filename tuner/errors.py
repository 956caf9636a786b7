"""The tuner's errors and exit codes.

Every error the tuner reports derives from `TunerError`, which carries the exit code it ends
the run with; the CLI turns one into a single `error:` line and goes on with the next model.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_NOT_TUNED = 1  # a model could not be tuned (its config, files, server, study...)
EXIT_USAGE = 2  # bad flags, no such repository or model
EXIT_NO_FEASIBLE = 3  # every configuration missed the budget: nothing was written
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM: the study is kept and resumes next run


class TunerError(Exception):
    """An error the user can act on; its message is one line meant for them."""

    exit_code = EXIT_NOT_TUNED


class TuneUsageError(TunerError):
    """The command itself is wrong: no such repository, no such model."""

    exit_code = EXIT_USAGE


class ReportError(TunerError):
    """A run cannot be reported: no summary, or one that cannot be read (another version's,
    say). `autotune report` was given the wrong folder: a usage error."""

    exit_code = EXIT_USAGE


# With several models the run exits with the most severe of their codes, least first.
_SEVERITY = (EXIT_OK, EXIT_NO_FEASIBLE, EXIT_NOT_TUNED, EXIT_USAGE, EXIT_INTERRUPTED)


def worst(*codes: int) -> int:
    """The most severe exit code: a model that could not be tuned outweighs one that met no
    budget, which outweighs success."""
    return max(codes, key=lambda code: _SEVERITY.index(code) if code in _SEVERITY else 0)


def one_line(error: BaseException) -> str:
    """The error's message on one line (a server's log tail, say, joined with ' | ')."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " | ".join(lines) or type(error).__name__
