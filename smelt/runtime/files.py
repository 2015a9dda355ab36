"""Reading files a user names without trusting them: regular files only (a FIFO
would block a reader for ever, /dev/zero never end), checked by type before any
open. Standard library only: every layer may use it."""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from smelt.errors import InvalidModel, SmeltError


def regular_file(path: str, what: str) -> int:
    """The size of `path`, a regular file (or a link to one); a FIFO, device,
    socket or folder is refused by its type, without opening it (a FIFO would
    block a reader for ever, /dev/zero never end)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SmeltError(f"no {what} file '{path}'") from None
    except OSError as e:
        raise SmeltError(f"cannot read the {what} '{path}': {e}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise InvalidModel(
            f"the {what} '{path}' is {kind}: give a regular file (smelt reads "
            "nothing else)"
        )
    return st.st_size


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def open_regular(path: str, what: str) -> BinaryIO:
    """`path` opened for reading in binary, checked to be a regular file before
    (by name) and after (the open file: a file swapped in between is caught);
    O_NONBLOCK, so that not even the open of a FIFO waits."""
    regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise SmeltError(f"cannot read the {what} '{path}': {e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidModel(f"the {what} '{path}' is not a regular file")
    return os.fdopen(fd, "rb")
