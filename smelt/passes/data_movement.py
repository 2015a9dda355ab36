"""Chains of reshapes and transposes as one permutation of "atoms" (factors of the
source's dims): what graph-simplify uses to turn such a chain into at most one
transpose between two reshapes (ShuffleNet's channel shuffle in NHWC was three
transposes: to NCHW, the shuffle, back)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Atoms:
    """A tensor as groups of atoms: `dims[k]` lists the atoms of dim k (dims of
    size 1 hold none); `source` is the atoms in the source's row-major order."""

    size: dict[int, int]
    dims: list[list[int]]
    source: list[int] = field(default_factory=list)

    @staticmethod
    def of_shape(shape: list[int]) -> Atoms:
        atoms = Atoms({}, [])
        for d in shape:
            group = []
            if d != 1:
                atom = len(atoms.size)
                atoms.size[atom] = d
                atoms.source.append(atom)
                group.append(atom)
            atoms.dims.append(group)
        return atoms

    def transpose(self, perm: list[int]) -> None:
        self.dims = [self.dims[p] for p in perm]

    def reshape(self, shape: list[int]) -> bool:
        """Regroups the atoms into `shape`, splitting an atom where a dim ends
        inside it; False when a dim cannot be made of whole atoms or splits."""
        seq = [a for group in self.dims for a in group]
        dims: list[list[int]] = []
        i = 0
        for d in shape:
            group: list[int] = []
            while math.prod(self.size[a] for a in group) < d:
                if i == len(seq):
                    return False
                have = math.prod(self.size[a] for a in group)
                atom = seq[i]
                if have * self.size[atom] <= d:
                    group.append(atom)
                    i += 1
                    continue
                outer = d // have
                if d % have or self.size[atom] % outer:
                    return False
                inner = self._split(atom, outer)
                seq[i : i + 1] = [atom, inner]
                group.append(atom)
                i += 1
            if math.prod(self.size[a] for a in group) != d:
                return False
            dims.append(group)
        if i != len(seq):
            return False
        self.dims = dims
        return True

    def _split(self, atom: int, outer: int) -> int:
        """Splits `atom` into itself (the `outer` factor) and a new inner atom
        right after it, in the source order too (row-major)."""
        inner = len(self.size)
        self.size[inner] = self.size[atom] // outer
        self.size[atom] = outer
        at = self.source.index(atom)
        self.source.insert(at + 1, inner)
        for group in self.dims:
            if atom in group:
                group.insert(group.index(atom) + 1, inner)
        return inner

    def as_one_transpose(self) -> tuple[list[int], list[int]]:
        """(shape of the source as atoms, the permutation of those atoms that gives
        this tensor's element order)."""
        final = [a for group in self.dims for a in group]
        perm = [self.source.index(a) for a in final]
        return [self.size[a] for a in self.source], perm
