"""Which files of a directory any process opens, from the kernel (inotify's IN_OPEN on the
directory): a warm load that opened a checkpoint file, in Python, in Rust (safetensors) or in C++,
shows here."""

import ctypes
import ctypes.util
import os
import struct

_IN_OPEN = 0x00000020
_IN_NONBLOCK = 0o4000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then the name, padded

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


class FileOpens:
    """with FileOpens(directory) as opens: ...; then opens.names(): the names opened meanwhile."""

    def __init__(self, directory):
        self.directory = os.fspath(directory)
        self.fd = -1
        self._names = []

    def __enter__(self):
        self.fd = _libc.inotify_init1(_IN_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if _libc.inotify_add_watch(self.fd, self.directory.encode(), _IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {self.directory}")
        return self

    def _drain(self):
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size: offset + _EVENT.size + length].rstrip(b"\0").decode()
                if mask & _IN_OPEN and name:
                    self._names.append(name)
                offset += _EVENT.size + length

    def __exit__(self, *exc):
        self._drain()
        os.close(self.fd)
        return False

    def names(self):
        return list(self._names)
