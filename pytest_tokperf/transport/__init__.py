"""How an engine's bytes arrive: HTTP streaming under every adapter.

``stream`` (one streamed generation, timed per event), ``rawhttp`` (the stdlib reader that
times bytes as they land), ``events`` (SSE and NDJSON framing), ``credentials`` (API keys
and the secret scrubber). Nothing here knows an engine's JSON: that is ``engines/``.
"""

MAX_BODY_BYTES = 8 << 20
"""The largest non-streamed answer read (``--tokperf-max-body``): JSON from /props,
/v1/models, /metrics ... A longer one is refused, never buffered whole."""

DEFAULT_IDLE_TIMEOUT_S = 30.0
"""How long a stream may go without a token once tokens flow (``--tokperf-idle-timeout``)."""
