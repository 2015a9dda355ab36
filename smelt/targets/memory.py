"""How much memory a compiled model may use: the machine's, or a limit the user sets
(`smelt.compile(..., memory_limit=)`, `--memory-limit 8G`), and how messages say it."""

from __future__ import annotations

import os
import re

from smelt.errors import SmeltError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?\s*", re.IGNORECASE)


def machine_memory() -> int:
    """This machine's physical memory in bytes (0 when the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def parse_size(text: str | int) -> int:
    """Bytes from `8G`, `512M`, `1.5G`, `64K`, `4096` (binary units: G = 2**30; a
    trailing `B` / `iB` is allowed); SmeltError for anything else or for 0."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.fullmatch(str(text))
        if match is None:
            raise SmeltError(
                f"bad memory size '{text}': write a number of bytes with an optional "
                "unit K, M, G or T (binary), e.g. 8G or 512M"
            )
        value = int(float(match[1]) * _UNITS[match[2].upper()])
    if value <= 0:
        raise SmeltError(f"a memory limit must be positive, not '{text}'")
    return value


def resolve_limit(limit: int) -> int:
    """The limit in bytes: `limit`, or the machine's memory when it is 0 (0 when
    neither is known: no limit)."""
    if limit < 0:
        raise SmeltError(f"memory_limit must be 0 (the machine's memory) or positive, "
                         f"not {limit}")
    return limit or machine_memory()


def describe_limit(limit: int) -> str:
    """How an error names the limit it exceeded: `limit` as given (0: the
    machine's), with how to change it."""
    if limit:
        return (f"the memory limit of {gib(limit)} (memory_limit= / --memory-limit; "
                "raise it if the machine has room)")
    return f"this machine's {gib(machine_memory())}"


def gib(nbytes: int) -> str:
    """`nbytes` in GiB for a message (one decimal; MiB below 1 GiB)."""
    if nbytes < 1 << 30:
        return f"{nbytes / 2**20:.1f} MiB"
    return f"{nbytes / 2**30:.1f} GiB"
