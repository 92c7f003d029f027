"""`make run` picks its Postgres and moto ports apart from the API's (cli/dev.py _saved_port).

The OS can hand a port it just reported free to the next caller at once; in CI the dev stack's
Postgres once took the port chosen for its API, and the gateway never bound."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cli import dev


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(dev, "STATE", tmp_path)
    return tmp_path


def test_a_fresh_port_is_never_one_already_taken(state: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    handed = iter([8123, 8123, 8124])  # the OS hands the API's port out again, then another
    monkeypatch.setattr(dev, "free_port", lambda: next(handed))
    assert dev._saved_port("pg-port", taken={8123}) == 8124
    assert (state / "pg-port").read_text() == "8124"


def test_a_saved_port_is_kept_when_free_and_not_taken(state: Path) -> None:
    with socket.socket() as s:  # a port that is free once this block closes it
        s.bind(("127.0.0.1", 0))
        saved = s.getsockname()[1]
    (state / "pg-port").write_text(str(saved))
    assert dev._saved_port("pg-port", taken=set()) == saved
    # The API was given the saved port this time: Postgres moves elsewhere and remembers it.
    moved = dev._saved_port("pg-port", taken={saved})
    assert moved != saved
    assert (state / "pg-port").read_text() == str(moved)
