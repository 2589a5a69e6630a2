"""The fault corpus (``fault_corpus``), one test per case: each misbehaving engine ends
with tokperf's own one-line error holding the expected words, and no secret in it.

How long each takes is ``tests/package/test_bad_inputs_corpus.py``'s to check (limit + 2 s);
here ``bounded`` only turns a hang into a failure.
"""

from __future__ import annotations

import pytest
from tests.support.fault_corpus import PASSWORD, SECRET, Fault, fault_corpus
from tests.transport.test_engines_faults import bounded

from pytest_tokperf.errors import TokperfError

CORPUS = fault_corpus()


@pytest.mark.parametrize("fault", CORPUS, ids=[f.name for f in CORPUS])
def test_each_fault_ends_in_one_clear_line(fault: Fault) -> None:
    with fault.server() as server:  # type: ignore[attr-defined]
        url = server.url
        with pytest.raises(TokperfError) as caught:
            bounded(lambda: fault.call(url), fault.limit_s)
    message = str(caught.value)
    assert "\n" not in message
    assert fault.expect.lower() in message.lower(), message
    assert SECRET not in message and PASSWORD not in message and "hunter2" not in message
