"""A gateway shutdown step slower than SLOW_SHUTDOWN_STEP_S is logged by name (so a gateway
its supervisor had to kill says which step held it); a quick one is not logged."""
import asyncio
import logging

import pytest

from gateway import app


def test_a_slow_step_is_named_and_a_quick_one_is_silent(monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture):
    monkeypatch.setattr(app, "SLOW_SHUTDOWN_STEP_S", 0.05)
    with caplog.at_level(logging.WARNING, logger="gateway.app"):
        asyncio.run(app._timed("quick", asyncio.sleep(0)))
        asyncio.run(app._timed("syncs", asyncio.sleep(0.1)))
    slow = [r for r in caplog.records if r.getMessage() == "slow shutdown step"]
    assert [r.step for r in slow] == ["syncs"]  # type: ignore[attr-defined]
    assert slow[0].took_s >= 0.1  # type: ignore[attr-defined]
