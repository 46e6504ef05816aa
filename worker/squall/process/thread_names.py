"""Native names for a process's threads, so that ``top -H``, ``ps -L`` and ``/proc/<pid>/task/*/comm``
tell them apart: the kernel knows every Python thread as ``python`` (CPython 3.11 names none), while
a pod's CPU goes to a dozen threads whose roles differ (the links, the stream readers, gRPC's own).

Each thread started through :mod:`threading` takes its Python name, shortened to the kernel's 15
bytes; the main thread, the scheduler, keeps the process's name. Linux only; elsewhere a no-op.
"""

from __future__ import annotations

import ctypes
import functools
import re
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

PR_SET_NAME = 15  # prctl(2)
NAME_BYTES = 15  # the kernel's limit, without the terminating NUL


def native_name(name: str) -> str:
    """The kernel name for a thread named ``name``: a default name ``Thread-7 (_run_channel_spin_thread)``
    becomes what it runs (``run_channel_spi``), as the target says more than the number."""
    if (target := re.fullmatch(r"Thread-\d+ \((.+)\)", name)) is not None:
        name = target.group(1)
    return name.lstrip("_").encode()[:NAME_BYTES].decode(errors="ignore")


@functools.cache
def _prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None).prctl
    except (OSError, AttributeError):  # no prctl here: the threads keep the name they had
        return None


def _set_own_name(frame: FrameType, event: str, arg: Any) -> None:
    # A profile function, run in each new thread before its target: it names the thread and removes itself.
    sys.setprofile(None)
    if (prctl := _prctl()) is not None:
        prctl(PR_SET_NAME, native_name(threading.current_thread().name).encode(), 0, 0, 0)


def name_native_threads() -> None:
    """From now on, every thread :mod:`threading` starts in this process takes its Python name."""
    if sys.platform == "linux":
        threading.setprofile(_set_own_name)
