"""Squall's error types. Every message says what is wrong and what to change."""


class SquallError(Exception):
    """Base class of every error Squall raises on purpose."""


class TopologyError(SquallError):
    """The topology spec is invalid: the message names the component, the field and the fix."""


class ConfigError(SquallError):
    """A configuration value (environment, CLI flag, setting) is invalid."""


class CommandError(SquallError):
    """A rebalance's command to a process (:mod:`squall.process.control`) was refused (``refused``: the
    message is the process's reason), or it did not reach the process or was not answered."""

    def __init__(self, message: str, *, refused: bool = True) -> None:
        super().__init__(message)
        self.refused = refused


class EmitError(SquallError):
    """An emit was refused: wrong arity, an unsupported value type, or a bad target task."""


class FailedException(Exception):
    """Raise from ``BasicBolt.execute`` to fail the input tuple quietly (no error is reported)."""


class ReportedFailedException(FailedException):
    """Like :class:`FailedException`, but the error is also reported."""
