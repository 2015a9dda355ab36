"""Relocatable object code loaded into an MCJIT engine without compiling: the
symbols it imports (libm, pthreads, the compiler runtime) are read from its ELF
symbol table and bound from this process's libraries first."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
from collections.abc import Sequence
from functools import cache

import llvmlite.binding as llvm

from smelt.errors import InvalidModel, UnsupportedModel


def load_objects(
    objects: Sequence[bytes], entry: str, name: str
) -> llvm.ExecutionEngine:
    """An MCJIT engine holding the object code `objects` (one of which must define
    `entry`), linked together, the imports none defines bound first: an
    unresolved symbol would abort the process inside LLVM. `name` says whose
    code it is in errors ("the artifact 'm.smelt'")."""
    tables = [symbols(data, name) for data in objects]
    defined = {s for _, exports in tables for s in exports}
    wanted = {s for needs, _ in tables for s in needs} - defined
    missing = sorted(s for s in wanted if not _bind(s))
    if missing:
        raise UnsupportedModel(
            f"{name} calls {', '.join(missing)}, which this process cannot find "
            "(libm, libpthread or libgcc_s missing?)"
        )
    _initialize()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    tm = target.create_target_machine(codemodel="jitdefault", jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    try:
        for data in objects:
            engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        engine.finalize_object()
        if not engine.get_function_address(entry):
            raise RuntimeError(f"it defines no {entry}")
    except RuntimeError as e:
        raise _broken(name, f"does not load ({e})") from None
    return engine


@cache
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def symbols(
    obj: bytes, name: str = "the object code"
) -> tuple[list[str], list[str]]:
    """The undefined and the defined global symbols of a relocatable ELF64 object
    (little-endian)."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise UnsupportedModel(
            f"{name} holds object code this loader cannot read (only 64-bit "
            "little-endian ELF)"
        )
    try:
        shoff, = struct.unpack_from("<Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
        sections = [
            struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
            for i in range(shnum)
        ]
        undefined: list[str] = []
        defined: list[str] = []
        for _, kind, _, _, offset, size, link, _, _, entsize in sections:
            if kind != 2:  # SHT_SYMTAB
                continue
            strtab = sections[link]
            strings = obj[strtab[4] : strtab[4] + strtab[5]]
            for at in range(offset, offset + size, entsize or 24):
                at_name, info, _, shndx = struct.unpack_from("<IBBH", obj, at)
                if not at_name or info >> 4 not in (1, 2):  # GLOBAL / WEAK only
                    continue
                text = strings[at_name : strings.index(b"\0", at_name)].decode()
                (undefined if shndx == 0 else defined).append(text)  # 0: UNDEF
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as e:
        raise _broken(name, f"is malformed ({e})") from None
    return undefined, defined


@cache
def _libraries() -> tuple[ctypes.CDLL, ...]:
    """This process, then libm, libpthread and libgcc_s (the compiler runtime)."""
    libs = [ctypes.CDLL(None)]
    for name in ("m", "pthread", "gcc_s"):
        found = ctypes.util.find_library(name)
        for candidate in filter(None, (found, f"lib{name}.so.1", f"lib{name}.so.6")):
            try:
                libs.append(ctypes.CDLL(candidate))
                break
            except OSError:
                continue
    return tuple(libs)


def _bind(symbol: str) -> bool:
    """Makes `symbol` known to the JIT linker; False if no library has it."""
    for lib in _libraries():
        try:
            address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
        except AttributeError:
            continue
        if address:
            llvm.add_symbol(symbol, address)
            return True
    return False


def _broken(name: str, why: str) -> InvalidModel:
    return InvalidModel(f"the object code of {name} {why}: compile it again")
