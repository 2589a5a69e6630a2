"""How an engine's bytes arrive: HTTP streaming under every adapter (nothing here knows
an engine's JSON: that is ``engines/``)."""

MAX_BODY_BYTES = 8 << 20
"""The largest non-streamed answer read (``tokperf_max_body``); longer is refused."""

DEFAULT_IDLE_TIMEOUT_S = 30.0
"""How long a stream may go without a token once tokens flow (``tokperf_idle_timeout``)."""
