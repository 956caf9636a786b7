"""Opening a study storage from its URL: errors name the URL with its password masked, and a
missing database driver names the extra that installs it."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT
from tuner.search_study import open_storage, printable_url
from tuner.search_types import SearchError


def test_the_password_of_a_storage_url_is_masked() -> None:
    shown = printable_url("postgresql://tuner:hunter2@db.example:5432/studies")
    assert shown == "postgresql://tuner:***@db.example:5432/studies"
    assert printable_url("sqlite:////tmp/study.db") == "sqlite:////tmp/study.db"


def test_a_refused_connection_names_the_url_without_its_password() -> None:
    with socket.socket() as holder:  # a loopback port nothing listens on
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
    url = f"postgresql://tuner:hunter2@127.0.0.1:{port}/studies"
    with pytest.raises(SearchError) as error:
        open_storage(url)
    message = str(error.value)
    assert f"cannot open study storage postgresql://tuner:***@127.0.0.1:{port}/studies" in message
    assert "Connection refused" in message or "connection failed" in message
    assert "hunter2" not in message


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "study storage not a url is not a storage URL"),
        ("postgres://tuner:hunter2@127.0.0.1/studies", "(PostgreSQL's is postgresql://)"),
    ],
)
def test_a_url_of_no_known_database_says_so(url: str, expected: str) -> None:
    with pytest.raises(SearchError) as error:
        open_storage(url)
    assert expected in str(error.value)
    assert "hunter2" not in str(error.value)


_WITHOUT_PSYCOPG = """
import sys
sys.modules["psycopg"] = None  # this interpreter cannot import psycopg, as if not installed
from tuner.search_study import open_storage
from tuner.search_types import SearchError
try:
    open_storage("postgresql://tuner:hunter2@127.0.0.1:5432/studies")
except SearchError as exc:
    print(exc)
"""


def test_a_missing_postgresql_driver_names_the_extra_to_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PSYCOPG],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "study storage postgresql://tuner:***@127.0.0.1:5432/studies needs PostgreSQL's driver "
        "psycopg, which is not installed: pip install 'autotune[postgres]'"
    )
