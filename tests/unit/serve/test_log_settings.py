"""Log settings change what the process logs: severities, verbose messages, format; the file
is chosen at start (--log-file), never through the API."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from serve.errors import ErrorKind, ServeError
from serve.log_settings import LogSettings


@pytest.fixture
def settings() -> Iterator[LogSettings]:
    """Settings installed on the root logger; the root logger is restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    serve_level = logging.getLogger("serve").level
    logs = LogSettings()
    yield logs
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    logging.getLogger("serve").setLevel(serve_level)


def test_defaults_are_tritons(settings: LogSettings) -> None:
    assert settings.current() == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }


@pytest.fixture
def to_file(settings: LogSettings, tmp_path: Path) -> tuple[LogSettings, Path]:
    """Settings writing to a file, as `--log-file` sets them up at start."""
    file = tmp_path / "server.log"
    logs = LogSettings(log_file=str(file))
    logs.install()
    return logs, file


def test_settings_change_what_reaches_the_log_file(to_file: tuple[LogSettings, Path]) -> None:
    settings, file = to_file
    assert settings.current()["log_file"] == str(file)
    log = logging.getLogger("serve.test")
    log.debug("verbose one")
    log.info("info one")
    settings.update({"log_verbose_level": 1, "log_info": False})
    log.debug("verbose two")
    log.info("info two")
    log.warning("warning two")
    settings.update({"log_warning": False, "log_error": False})
    log.warning("warning three")
    log.error("error three")
    text = file.read_text()
    assert "info one" in text and "verbose two" in text and "warning two" in text
    for absent in ("verbose one", "info two", "warning three", "error three"):
        assert absent not in text


def test_iso8601_format(to_file: tuple[LogSettings, Path]) -> None:
    settings, file = to_file
    settings.update({"log_format": "ISO8601"})
    logging.getLogger("serve.test").info("stamped")
    line = file.read_text().splitlines()[-1]
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z I serve\.test: stamped$", line)


@pytest.mark.parametrize(
    ("update", "named"),
    [
        ({"log_info": "yes"}, "log_info"),
        ({"log_verbose_level": -1}, "log_verbose_level"),
        ({"log_verbose_level": True}, "log_verbose_level"),
        ({"log_format": "json"}, "log_format"),
        ({"log_colour": True}, "log_colour"),
    ],
)
def test_bad_values_name_the_setting_and_change_nothing(
    settings: LogSettings, update: dict, named: str
) -> None:
    before = settings.current()
    with pytest.raises(ServeError, match=f"'{named}'"):
        settings.update({"log_verbose_level": 3, **update})
    assert settings.current() == before


@pytest.mark.parametrize("file", ["/tmp/elsewhere.log", "/etc/cron.d/job", ""])
def test_the_log_file_cannot_be_changed_through_the_api(settings: LogSettings, file: str) -> None:
    """A client naming the file could make the server write any file it may write."""
    before = settings.current()
    with pytest.raises(ServeError) as caught:
        settings.update({"log_file": file, "log_verbose_level": 1})
    assert caught.value.kind is ErrorKind.UNSUPPORTED
    assert "--log-file" in caught.value.message
    assert settings.current() == before
