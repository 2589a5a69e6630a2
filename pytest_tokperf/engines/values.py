"""Every value an engine reports, checked before it is used: type, finiteness, range.

Adapters read an engine's JSON through ``Fields``. Absent and ``null`` mean "not said".
A value of the wrong type (text, list, object, boolean for a number), NaN, +-Infinity,
negative, fractional where a count is meant, or out of range is either *refused*, an
``EngineProtocolError`` naming the engine, the URL, the field and the value, where
nothing can be measured without it (the build, the version, the vocabulary size), or
*dropped*: it reads as unknown and a note says what was dropped. A dropped timing loses
the engine's own figure and keeps the client's measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pytest_tokperf.errors import EngineProtocolError
from pytest_tokperf.results import EngineTimings

T = TypeVar("T")

MAX_COUNT = 2**53
"""The largest size or count taken (bytes, parameters): exact as a float, fits SQLite."""
MAX_TOKENS = 2**26
"""The most tokens one request, context or vocabulary may hold (the longest contexts
served today are about 2**23 tokens)."""
MAX_SECONDS = 86400.0
"""The longest duration taken for one request: a day, the longest the client waits."""
MIN_SECONDS = 1e-9
"""The shortest duration above zero taken: a nanosecond, the finest engine clock (so
tokens over it stay a finite rate)."""

MAX_NOTES = 16
"""Notes kept per answer: a stream can repeat one wrong value in every event."""


class Unusable(ValueError):
    """Why an engine's value cannot be used, in a few words."""


def shown(value: object, width: int = 40) -> str:
    """``value``'s repr, cut to ``width`` characters with an ellipsis."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


_KINDS = ((bool, "a boolean"), (str, "text"), ((list, tuple), "a list"),
          (Mapping, "an object"), ((int, float), "a number"))


def _kind(value: object) -> str:
    return next((words for kind, words in _KINDS if isinstance(value, kind)),
                f"a {type(value).__name__}")


def _finite(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unusable(f"{_kind(value)}, not a number")
    try:
        number = float(value)
    except OverflowError:
        raise Unusable("too large to be a measurement") from None
    if not math.isfinite(number):
        raise Unusable("not a finite number")
    return number


def count_of(value: object, most: int = MAX_COUNT) -> int:
    """``value`` as a whole number in ``0..most``; else ``Unusable``."""
    if isinstance(value, int) and not isinstance(value, bool):
        whole = value
    else:
        number = _finite(value)
        if not number.is_integer():
            raise Unusable("not a whole number")
        whole = int(number)
    if whole < 0:
        raise Unusable("negative")
    if whole > most:
        raise Unusable(f"more than {most}")
    return whole


def seconds_of(value: object, per_s: float = 1.0) -> float:
    """A duration in units of which ``per_s`` make a second (1e3: ms), as seconds: zero,
    or from ``MIN_SECONDS`` to ``MAX_SECONDS``."""
    number = _finite(value)
    if number < 0:
        raise Unusable("negative")
    seconds = number / per_s
    if seconds > MAX_SECONDS:
        raise Unusable(f"longer than {MAX_SECONDS:.0f} s")
    if 0 < seconds < MIN_SECONDS:
        raise Unusable("shorter than a nanosecond")
    return seconds


def rate_of(value: object) -> float:
    """A rate (per second) above zero and finite."""
    number = _finite(value)
    if number <= 0:
        raise Unusable("not above zero")
    return number


def text_of(value: object) -> str:
    if not isinstance(value, str):
        raise Unusable(f"{_kind(value)}, not text")
    return value


def flag_of(value: object) -> bool:
    if not isinstance(value, bool):
        raise Unusable(f"{_kind(value)}, not true or false")
    return value


def int_or_none(text: str | None) -> int | None:
    """``text`` as ``int()`` reads it; None when absent or not a whole number."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def count_or_none(value: object, most: int = MAX_COUNT) -> int | None:
    """``count_of``, with an absent or unusable value as None (for a reading already
    checked and noted elsewhere)."""
    try:
        return None if value is None else count_of(value, most)
    except Unusable:
        return None


@dataclass(slots=True)
class Fields:
    """One JSON object an engine sent at ``url``, read field by field (module doc).

    ``refuse=True`` on a read makes a present, unusable value an ``EngineProtocolError``;
    otherwise it reads as None and ``notes`` (shared with ``inside`` readers) says why.
    """

    engine: str
    url: str
    raw: object
    path: str = ""
    notes: list[str] = field(default_factory=list)

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str) -> Any:
        """The raw value (None when absent, or when this is not an object)."""
        return self.raw.get(key) if isinstance(self.raw, Mapping) else None

    def has(self, key: str) -> bool:
        """Whether ``key`` is present and not null."""
        return self.get(key) is not None

    def refusal(self, key: str, value: object, why: str) -> EngineProtocolError:
        return EngineProtocolError(
            f"{self.engine} at {self.url}: {self.name(key)} is {shown(value, 80)} ({why}), not "
            f"what {self.engine} sends; check that --tokperf-url points at {self.engine} and "
            f"--tokperf-engine names it, or report the answer to the engine's authors")

    def _read(self, key: str, check: Callable[[object], T], refuse: bool) -> T | None:
        value = self.get(key)
        if value is None:
            return None
        try:
            return check(value)
        except Unusable as why:
            if refuse:
                raise self.refusal(key, value, str(why)) from None
            if len(self.notes) < MAX_NOTES:
                self.notes.append(f"{self.name(key)}={shown(value)} ({why})")
            return None

    def inside(self, key: str, *, refuse: bool = False) -> Fields:
        """The object at ``key`` (empty when absent or not an object, which is noted)."""
        value = self._read(key, _object_of, refuse)
        return Fields(self.engine, self.url, value or {}, self.name(key), self.notes)

    def count(self, key: str, *, most: int = MAX_COUNT, refuse: bool = False) -> int | None:
        return self._read(key, lambda v: count_of(v, most), refuse)

    def tokens(self, key: str, *, most: int = MAX_TOKENS, refuse: bool = False) -> int | None:
        """A token count (``most``: the request's limit where there is one)."""
        return self.count(key, most=min(most, MAX_TOKENS), refuse=refuse)

    def seconds(self, key: str, *, per_s: float = 1.0, refuse: bool = False) -> float | None:
        return self._read(key, lambda v: seconds_of(v, per_s), refuse)

    def rate(self, key: str, *, refuse: bool = False) -> float | None:
        return self._read(key, rate_of, refuse)

    def text(self, key: str, *, refuse: bool = False) -> str | None:
        return self._read(key, text_of, refuse)

    def flag(self, key: str, *, refuse: bool = False) -> bool | None:
        return self._read(key, flag_of, refuse)

    def scalar(self, key: str) -> str | None:
        """A setting as text: text, a whole or finite number, or a boolean; None else."""
        return self._read(key, _scalar_of, False)

    def timings(self, timings: EngineTimings) -> EngineTimings:
        """``timings`` held to the cross-field rules, carrying every note taken while
        reading them."""
        timings = _drafts(timings, self.notes)
        return replace(timings, dropped=(*timings.dropped, *dict.fromkeys(self.notes)))

    def noted(self, timings: EngineTimings | None) -> EngineTimings | None:
        """``timings`` as ``timings`` holds them; without any, the notes alone (None when
        there are no notes either)."""
        if timings is None and not self.notes:
            return None
        return self.timings(timings if timings is not None else EngineTimings())

    def warning(self) -> tuple[str, ...]:
        """The notes as one ``EngineInfo`` warning (``unusable_warning``)."""
        return unusable_warning(self.engine, self.url, self.notes)


def unusable_warning(engine: str, url: str, notes: list[str]) -> tuple[str, ...]:
    """What ``engine`` at ``url`` said about itself that was dropped, as one
    ``EngineInfo`` warning (none without notes)."""
    if not notes:
        return ()
    said = "; ".join(dict.fromkeys(notes))
    return (f"{engine} at {url} sent unusable values, left unknown: {said}",)


def _object_of(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Unusable(f"{_kind(value)}, not an object")
    return value


def _scalar_of(value: object) -> str:
    if isinstance(value, (bool, str)):
        return str(value)
    number = _finite(value)
    return str(int(number)) if isinstance(value, int) else str(number)


def _drafts(timings: EngineTimings, notes: list[str]) -> EngineTimings:
    """No accepted draft tokens without drafted ones, nor more of them."""
    drafted, accepted = timings.draft_tokens, timings.draft_accepted_tokens
    if accepted is not None and (drafted is None or accepted > drafted):
        notes.append(f"{accepted} accepted draft tokens, more than the {drafted} drafted")
        return replace(timings, draft_accepted_tokens=None)
    return timings


_TIMING_CHECKS: dict[str, Callable[[object, int], object]] = {
    "prompt_tokens": lambda v, _: count_of(v, MAX_TOKENS),
    "cached_prompt_tokens": lambda v, _: count_of(v, MAX_TOKENS),
    "generated_tokens": lambda v, asked: count_of(v, asked),
    "draft_tokens": lambda v, _: count_of(v, MAX_TOKENS),
    "draft_accepted_tokens": lambda v, _: count_of(v, MAX_TOKENS),
    "prefill_s": lambda v, _: seconds_of(v),
    "decode_s": lambda v, _: seconds_of(v),
}


def checked_timings(timings: EngineTimings, asked_tokens: int) -> EngineTimings:
    """An adapter's ``EngineTimings`` held to the same rules (a registered adapter may
    build them from anything): each unusable figure None, with a note in ``dropped``."""
    notes: list[str] = []
    values: dict[str, Any] = {}
    for name, check in _TIMING_CHECKS.items():
        value = getattr(timings, name)
        if value is None:
            continue
        try:
            values[name] = check(value, min(asked_tokens, MAX_TOKENS))
        except Unusable as why:
            values[name] = None
            notes.append(f"{name}={shown(value)} ({why})")
    checked = _drafts(replace(timings, **values), notes)
    return replace(checked, dropped=(*timings.dropped, *notes)) if notes else checked
