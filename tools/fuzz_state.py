"""The random program generator's state (`tools.fuzz_gen`): the sizes, tensors,
inputs, outputs and statements made so far, the random stream of one seed, and what
is known of each index variable's range and each tensor's dimensions."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tools.fuzz_ir import Bin, Num, Size, Stmt

SIZE_VALUES = (1, 2, 3, 5, 7, 13, 17, 33)
SIZE_WEIGHTS = (3, 4, 5, 5, 4, 2, 1, 1)
MAX_POINTS = 2500
REDUCTIONS = ("+=!", "+=!", "+=!", "max=!", "min=!", "*=!", "+=", "max=")


@dataclass
class VarInfo:
    lo: object
    hi: object
    lo_c: int
    hi_c: int  # concrete exclusive upper bound (the largest over outer variables)
    fits: set = field(default_factory=set)  # extents E with 0 <= v < E for all sizes
    stated: bool = True


@dataclass
class TensorInfo:
    name: str
    dtype: str
    dims: tuple  # (Node, concrete) per dimension
    output: bool = False
    bound: tuple | None = None  # index tensors: (Node, concrete) of what they index
    readable: bool = True  # False: an output whose extents are no size expression


class Gen:
    def __init__(self, seed: int, exact: bool, grad: bool) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.exact, self.grad = exact, grad
        self.dtype = "double" if grad or self.rng.random() < 0.4 else "float"
        self.sizes: dict[str, int] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.stmts: list[Stmt] = []
        self.nvar = 0

    # ---------------------------------------------------------------- names, sizes
    def size(self) -> tuple:
        """A size symbol (new or existing) or a small literal, as (Node, concrete)."""
        r = self.rng
        if r.random() < 0.2:
            v = r.choice((1, 1, 2, 3))
            return (Num(v), v)
        names = list(self.sizes)
        if names and (len(names) >= 3 or r.random() < 0.6):
            n = r.choice(names)
            return (Size(n), self.sizes[n])
        n = "NMKLP"[len(names)]
        self.sizes[n] = r.choices(SIZE_VALUES, SIZE_WEIGHTS)[0]
        return (Size(n), self.sizes[n])

    def fresh(self, base: str = "i") -> str:
        self.nvar += 1
        return f"{base}{self.nvar}"

    def new_input(self, rank: int | None = None) -> TensorInfo:
        r = self.rng
        rank = r.choices((0, 1, 2, 3), (2, 5, 5, 2))[0] if rank is None else rank
        name = "ABCDEFGH"[len(self.inputs)] if len(self.inputs) < 8 else f"X{len(self.inputs)}"
        t = TensorInfo(name, self.dtype, tuple(self.size() for _ in range(rank)))
        self.tensors[name] = t
        self.inputs.append(name)
        return t

    def new_index_tensor(self, bound: tuple) -> TensorInfo:
        name = f"idx{len(self.inputs)}"
        t = TensorInfo(name, self.rng.choice(("int32", "int64")), (self.size(),), bound=bound)
        self.tensors[name] = t
        self.inputs.append(name)
        return t


def _minus(a: object, b: object) -> object:
    if isinstance(b, Num) and b.value == 0:
        return a
    return Bin("-", a, b)


def _plus(a: object, b: object) -> object:
    if isinstance(b, Num) and b.value == 0:
        return a
    return Bin("+", a, b)
