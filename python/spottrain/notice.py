"""Termination notices: the signal the agent sends and the file it writes.

The signal handler only sets a flag (Python runs it in the main thread between
two bytecodes, possibly in the middle of a save or of I/O, so it does nothing
else). The user's `on_notice` callback runs later, once, from the first call
to `stop_requested()` that sees the notice, on the thread that calls it.
"""
import json
import logging
import math
import os
import signal
import threading
import time
from typing import Callable, Optional

log = logging.getLogger("spottrain")


class NoticeWatcher:
    """Watches for a notice: `signum` delivered to this process, or
    `notice_file` present. Not thread-safe apart from the handler's flag."""

    def __init__(self, notice_file: Optional[str], signum: Optional[int],
                 on_notice: Optional[Callable[[Optional[dict]], None]] = None):
        self._file = notice_file
        self._signum = signum
        self._on_notice = on_notice
        self._signalled = False
        self._fired = False
        self._notice = None
        self._bad_file_logged = False
        self._previous = None
        self._installed = False

    def install(self) -> bool:
        """Installs the signal handler; False (with a warning) when it cannot
        be installed because this is not the main thread."""
        if self._signum is None:
            return False
        if threading.current_thread() is not threading.main_thread():
            log.warning("spottrain: not on the main thread, so no handler for %s; notices "
                        "are seen through the notice file only",
                        signal.Signals(self._signum).name)
            return False
        self._previous = signal.signal(self._signum, self._handle)
        self._installed = True
        return True

    def uninstall(self) -> None:
        """Puts back the handler that was there before install()."""
        if self._installed:
            signal.signal(self._signum, self._previous)
            self._installed = False

    def _handle(self, signum, frame):
        self._signalled = True  # nothing else here: see the module comment

    @property
    def signalled(self) -> bool:
        return self._signalled

    def stop_requested(self) -> bool:
        """True once the signal came or the notice file exists (and from then
        on). Calls on_notice(notice() or None) the first time it is true."""
        stop = self._signalled or (self._file is not None and os.path.exists(self._file))
        if stop and not self._fired:
            self._fired = True
            if self._signalled and self._signum is not None:
                log.warning("spottrain: %s received: stopping at the next step boundary",
                            signal.Signals(self._signum).name)
            if self._on_notice is not None:
                self._on_notice(self.notice())
        return stop

    def notice(self) -> Optional[dict]:
        """The parsed notice file, or None when there is none (yet) or it is
        not a notice (warned about once, naming the file and the reason)."""
        if self._notice is not None or self._file is None:
            return self._notice
        try:
            with open(self._file, "rb") as f:
                text = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            self._bad_notice(f"cannot read it: {e}")
            return None
        try:
            value = json.loads(text)
        except ValueError as e:
            self._bad_notice(f"not JSON: {e}")
            return None
        if not isinstance(value, dict):
            self._bad_notice("not a JSON object")
            return None
        for key in ("notice_unix_s", "deadline_unix_s"):
            v = value.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not math.isfinite(v)):
                self._bad_notice(f"field {key}: expected a number, got {v!r}")
                return None
        self._notice = value
        return value

    def _bad_notice(self, reason):
        if not self._bad_file_logged:
            self._bad_file_logged = True
            log.warning("spottrain: notice file %s: %s", self._file, reason)

    def deadline_s(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds left until the reclaim (0 once past it), or None without a
        notice or a deadline in it."""
        n = self.notice()
        if n is None or n.get("deadline_unix_s") is None:
            return None
        now = time.time() if now is None else now
        return max(0.0, float(n["deadline_unix_s"]) - now)
