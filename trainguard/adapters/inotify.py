"""A minimal inotify watch (Linux) through ctypes, so a directory's changes can wake a selector.

The SDK channel files are watched this way: the supervisor sleeps in the same ``select`` as
for process exits and wakes the moment a rank writes a record. Where inotify is missing the
caller falls back to reading on every loop tick.
"""

from __future__ import annotations

import ctypes
import os

IN_MODIFY = 0x00000002
IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080


class DirectoryWatch:
    """A non-blocking inotify descriptor watching one directory for writes and new files."""

    def __init__(self, path: str) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        if libc.inotify_add_watch(fd, os.fsencode(path), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0:
            errno = ctypes.get_errno()
            os.close(fd)
            raise OSError(errno, f"inotify_add_watch {path} failed")
        self.fd = fd

    def drain(self) -> None:
        """Consume pending notifications; which file changed is not needed."""
        try:
            while os.read(self.fd, 65536):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)
