"""The error tree every layer raises, and the plugin's warning category.

Messages name the value (``!r``), where it came from and what to do. Imports nothing.
"""

from __future__ import annotations


class TokperfError(Exception):
    """Base of every error pytest-tokperf raises on purpose."""


class ConfigError(TokperfError):
    """A setting, option or argument that cannot be used as given."""


class EngineError(TokperfError):
    """The engine could not be started, reached or understood."""


class EngineUnavailable(EngineError):
    """The engine is not there: binary missing, server down, port refused."""


class RequestStopped(EngineError):
    """A streamed request its caller stopped midway (``GenerationRequest.stop``)."""


class EngineProtocolError(EngineError):
    """The engine answered, but not in the shape its documented API promises."""


class InstallError(EngineError):
    """Building or installing an engine from the package registry failed."""


class ModelFileError(TokperfError):
    """A model file that is missing, truncated or not a usable GGUF."""


class StorageError(TokperfError):
    """The results database cannot be opened, migrated or written."""


class MeasuredBusy(TokperfError):
    """A measurement the neighbours disturbed (stopped once it read busy, ``partial`` the
    repetitions before), or a floor checked on one: neither a pass nor a fail. The plugin
    reports it as a skip with the load (``--tokperf-busy fail``: a fail)."""

    def __init__(self, message: str, partial: object | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class TokperfWarning(UserWarning):
    """Something a user should know that does not stop the run."""


class MeasurementError(EngineError):
    """A measurement that broke off; ``partial`` holds the repetitions done before."""

    def __init__(self, message: str, partial: object | None = None) -> None:
        super().__init__(message)
        self.partial = partial
