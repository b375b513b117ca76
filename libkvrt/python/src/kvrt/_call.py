# SPDX-License-Identifier: MIT
"""Calling libkvrt: errno checking, the log callback, argument checks."""
from __future__ import annotations

import logging
import operator
import threading
from typing import Any, Dict, List, Optional, Tuple

from . import _lib
from .errors import make_error

logger = logging.getLogger("kvrt")
logger.addHandler(logging.NullHandler())  # a library prints nothing unless asked

LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG = 3, 4, 6, 7
_PY_LEVEL = {LOG_ERR: logging.ERROR, LOG_WARNING: logging.WARNING, LOG_INFO: logging.INFO,
             LOG_DEBUG: logging.DEBUG}

_tls = threading.local()


def _on_log(_arg: Any, level: int, msg: Optional[bytes]) -> None:
    # Called by libkvrt, possibly from its own threads: never raise.
    try:
        text = msg.decode("utf-8", "replace") if msg else ""
        msgs: Optional[List[Tuple[int, str]]] = getattr(_tls, "msgs", None)
        if msgs is not None:
            msgs.append((level, text))
        logger.log(_PY_LEVEL.get(level, logging.INFO), "%s", text)
    except BaseException:  # noqa: BLE001 - a C callback must not propagate
        pass


#: The one C callback every handle gets (kept alive for the process).
LOG_CALLBACK = _lib.LOG_FN(_on_log)


def _last_message() -> Optional[str]:
    msgs = getattr(_tls, "msgs", None) or []
    for level, text in reversed(msgs):
        if level <= LOG_WARNING:
            return text
    return None


def call(name: str, *args: Any, detail: str = "",
         why: Optional[Dict[int, str]] = None) -> int:
    """Call libkvrt function ``name``; raise its errno as a KvrtError.

    ``why`` maps errnos to what the caller should do; the message gets it
    after ``detail``.
    """
    _tls.msgs = []
    try:
        ret = getattr(_lib.lib, name)(*args)
        if ret is not None and ret < 0:
            advice = (why or {}).get(-ret)
            if advice:
                detail = f"{detail}: {advice}" if detail else advice
            raise make_error(ret, name, _last_message(), detail)
    finally:
        _tls.msgs = None
    return ret


def check(ret: int, name: str, detail: str = "") -> int:
    """Raise for a negative return of a call made directly."""
    if ret < 0:
        raise make_error(ret, name, None, detail)
    return ret


def need_int(v: Any, what: str) -> int:
    """An int argument (anything with __index__), else TypeError."""
    if isinstance(v, bool):
        raise TypeError(f"{what}: pass an int, not bool")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{what}: pass an int, not {type(v).__name__}") from None


def need_uint(v: Any, what: str, bits: int = 32) -> int:
    """An unsigned int of ``bits`` bits, else TypeError/ValueError."""
    i = need_int(v, what)
    if i < 0 or i >= 1 << bits:
        raise ValueError(f"{what} {i}: pass an int in [0, 2**{bits})")
    return i
