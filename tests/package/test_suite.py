"""The suite's own rules: engine tests marked from their fixtures."""

from __future__ import annotations

import pytest
from tests.conftest import ENGINE_FIXTURES


def test_every_test_that_needs_the_engine_is_marked(request: pytest.FixtureRequest) -> None:
    needing = [item for item in request.session.items
               if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ()))]
    assert all(item.get_closest_marker("engine") for item in needing)
    if request.config.getoption("markexpr") == "not engine":
        assert not needing  # deselected, so no binary is needed
