# SPDX-License-Identifier: MIT
"""Exceptions: every negative errno from libkvrt becomes a :class:`KvrtError`.

:class:`KvrtError` is an :class:`OSError`; each errno gets its own subclass,
which also derives from Python's own class for that errno where Python has
one (``ENOENT`` -> :class:`FileNotFoundError`, ``EEXIST`` ->
:class:`FileExistsError`, ``EACCES``/``EPERM`` -> :class:`PermissionError`,
``EAGAIN`` -> :class:`BlockingIOError`, ``EINTR`` -> :class:`InterruptedError`,
``ETIMEDOUT`` -> :class:`TimeoutError`).  So ``except FileNotFoundError``
works, and so does ``except kvrt.KvrtError``.

Every exception carries ``errno``, ``strerror`` (the message: the call,
the C library's text for the errno, and detail), ``function`` (the libkvrt call that failed) and
``library_message`` (the last line libkvrt logged during that call, at
warning level or above, or None: libkvrt has no last-error string, it
reports detail through its log callback, which this package always
installs).

Arguments that are wrong on the Python side (a wrong type, dtype, shape, a
non-contiguous array, a closed handle) raise :class:`TypeError` or
:class:`ValueError` before libkvrt is called.
"""
from __future__ import annotations

import errno as _errno
import os
from typing import Dict, Optional, Type


class KvrtError(OSError):
    """A libkvrt call returned a negative errno."""

    function: str = ""
    library_message: Optional[str] = None


class InvalidArgumentError(KvrtError):
    """EINVAL: libkvrt refused an argument."""


class NotFoundError(KvrtError, FileNotFoundError):
    """ENOENT: no such space, device or record."""


class ExistsError(KvrtError, FileExistsError):
    """EEXIST: the space exists (EXCL), or its name is another owner's."""


class AccessError(KvrtError, PermissionError):
    """EACCES or EPERM: not allowed (mode, owner, a block not owned)."""


class NoSpaceError(KvrtError):
    """ENOSPC: the quota or the pool is exhausted."""


class TooBigError(KvrtError):
    """E2BIG: a count or size above the library's limit."""


class OutOfBoundsError(KvrtError):
    """ERANGE: a block breaks the bounds rule of kvrt.h."""


class LimitOverflowError(KvrtError):
    """EOVERFLOW: a size or reference count beyond its bound."""


class NoDeviceError(KvrtError):
    """ENODEV: no kvpool device (kmod forced) or no GPU."""


class NotSupportedError(KvrtError):
    """EOPNOTSUPP/ENOTSUP: the backend lacks the feature."""


class BadAddressError(KvrtError):
    """EFAULT: a missing or unwritable array, or a block id of a space with no
    memory behind it (one the space never backed: allocate blocks first and
    use only ids this space handle holds)."""


class OutOfMemoryError(KvrtError):
    """ENOMEM."""


class WouldBlockError(KvrtError, BlockingIOError):
    """EAGAIN: still running, or a resource is temporarily short."""


class InterruptedCallError(KvrtError, InterruptedError):
    """EINTR."""


class BusyError(KvrtError):
    """EBUSY."""


_BY_ERRNO: Dict[int, Type[KvrtError]] = {
    _errno.EINVAL: InvalidArgumentError,
    _errno.ENOENT: NotFoundError,
    _errno.EEXIST: ExistsError,
    _errno.EACCES: AccessError,
    _errno.EPERM: AccessError,
    _errno.ENOSPC: NoSpaceError,
    _errno.E2BIG: TooBigError,
    _errno.ERANGE: OutOfBoundsError,
    _errno.EOVERFLOW: LimitOverflowError,
    _errno.ENODEV: NoDeviceError,
    _errno.EOPNOTSUPP: NotSupportedError,
    _errno.ENOTSUP: NotSupportedError,
    _errno.EFAULT: BadAddressError,
    _errno.ENOMEM: OutOfMemoryError,
    _errno.EAGAIN: WouldBlockError,
    _errno.EINTR: InterruptedCallError,
    _errno.EBUSY: BusyError,
}

_DYNAMIC: Dict[int, Type[KvrtError]] = {}


def error_class(err: int) -> Type[KvrtError]:
    """The exception class for a positive errno value."""
    cls = _BY_ERRNO.get(err)
    if cls is not None:
        return cls
    cls = _DYNAMIC.get(err)
    if cls is None:
        # Python's own subclass for this errno, if any (OSError(e, ...) picks it).
        py = type(OSError(err, ""))
        if py is OSError:
            cls = KvrtError
        else:
            cls = type("Kvrt" + py.__name__, (KvrtError, py), {"__module__": __name__})
        _DYNAMIC[err] = cls
    return cls


def too_old(function: str, why: str) -> NotSupportedError:
    """The refusal of a call the loaded library is too old for (``why`` says which)."""
    e = make_error(-_errno.EOPNOTSUPP, function, None,
                   why + "; build or install a newer libkvrt, or point KVRT_LIBRARY at one")
    assert isinstance(e, NotSupportedError)  # noqa: S101
    return e


def make_error(ret: int, function: str, library_message: Optional[str] = None,
               detail: str = "") -> KvrtError:
    """Build the exception for ``ret``, a negative errno returned by ``function``."""
    err = -ret
    strerror = os.strerror(err)
    msg = f"{function}: {strerror}"
    if detail:
        msg += f" ({detail})"
    if library_message:
        msg += f"; libkvrt: {library_message}"
    exc = error_class(err)(err, msg)
    exc.function = function
    exc.library_message = library_message
    return exc
