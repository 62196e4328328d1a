"""Every error a user can cause derives from `LuminalError` and names the thing at fault."""


class LuminalError(Exception):
    """Base class of every error luminal raises on purpose."""


class DTypeError(LuminalError, TypeError):
    """Operands of an op have mismatched or unsupported dtypes."""


class ShapeError(LuminalError, ValueError):
    """Shapes do not broadcast, do not match an op's contract, or cannot be reshaped."""


class UnknownOpError(LuminalError, KeyError):
    """An op name that is not in luminal's op table."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UnsupportedError(LuminalError, NotImplementedError):
    """A well-formed request that luminal does not implement (yet)."""


class InputError(LuminalError, ValueError):
    """A missing, extra, or wrongly shaped/typed input at run time."""


class IndexOutOfRange(LuminalError, IndexError):
    """A Gather/Scatter index outside its axis at run time."""


class DivisionByZero(LuminalError, ZeroDivisionError):
    """An integer division or remainder by zero at run time (torch raises too; floats give inf/NaN)."""


class OptionError(LuminalError, ValueError):
    """An unknown value for a setting (a precision name, ...): lists the valid ones."""


class DeviceError(LuminalError, ValueError):
    """An unknown device, or one this machine cannot run: says what is missing and how to get it."""


class CacheWarning(RuntimeWarning):
    """The on-disk cache folder cannot be used (not writable, full, not a folder, or open to other
    users): luminal builds in a private temporary folder instead. Says which folder and why."""


class CollectiveError(LuminalError, RuntimeError):
    """The ranks of a process group cannot run a compiled graph with collectives together: one
    failed to compile it, or their collectives differ. Raised on every rank (naming the rank,
    the graph and why) instead of leaving the others waiting in a collective."""
