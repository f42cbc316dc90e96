"""Math builtins for the LLVM backend: each one an LLVM intrinsic, a libm call of the
right precision (`expf` for float32, `exp` for float64), or a short composite.

float32 `exp` is inline IR (`compiler.cpu.llvm_exp`: a polynomial that vectorises
on any host, within 1 ulp) unless `vector_math(False)` is in force.

Vector math: where glibc's libmvec is present (x86_64 Linux) and the host has AVX2,
`exp` (float64), `log`, `pow`, `tanh` and the other functions of `MVEC` are called through a
name of ours (`tcc_mvec_expf`, bound to libm's `expf` with `llvm.add_symbol`) that
carries the call-site attribute `"vector-function-abi-variant"`: LLVM's loop
vectoriser then calls libmvec's `_ZGVdN8v_expf` (AVX2, 8 lanes) or `_ZGVeN16v_expf`
(AVX-512, 16 lanes) on whole vectors, and a loop that does not vectorise keeps the
scalar libm call. (`@expf` itself would become `llvm.exp.f32`, which codegen scalarises
again; llvmlite has no switch for LLVM's `-vector-library`.) `sqrt` is `llvm.sqrt`,
which vectorises by itself; `rsqrt(x) = 1/sqrt(x)` and a sigmoid `1/(1+exp(-x))`
vectorise with their parts. Accuracy (glibc's documentation: at most 4 ulp for the
vector variants; measured by `tests/codegen/test_vector_math.py` over float32 bit
patterns spread over the whole range and random float64 bit patterns, against NumPy
in float64): see `ULP_BOUND`. Special values follow C: nan in -> nan out, overflow
-> inf, underflow -> 0 or a denormal, log(0) = -inf, log(<0) = nan.
Where libmvec or AVX2 is missing, or `vector_math(False)` is in force (the tests'
switch for the portable path), every call is the scalar libm call (exact to libm's
0.5-1 ulp) and loops containing it do not vectorise.

float16 arguments are widened to float32 for the call and the result narrowed back.
The composites follow the reference in `compiler.loops.mathref`: `rsqrt(x) = 1/sqrt(x)`,
`norm3d` and friends sum squares in float64 (no overflow for float32 inputs),
`normcdf(x) = erfc(-x/sqrt(2))/2`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import llvmlite.binding as llvm
from llvmlite import ir

from compiler.cpu.llvm_exp import emit_expf
from compiler.diagnostics import InternalError
from compiler.loops import DType

F32 = ir.FloatType()
F64 = ir.DoubleType()

# LLVM intrinsics, overloaded on the float type: llvm.<name>.f32 / .f64.
INTRINSIC = {
    "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "log10": "log10",
    "sqrt": "sqrt", "pow": "pow", "sin": "sin", "cos": "cos", "fabs": "fabs",
    "floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "round",
    "copysign": "copysign", "fma": "fma", "fmin": "minnum", "fmax": "maxnum",
}  # fmt: skip

# libm functions: the float32 variant is the name with an `f` suffix.
LIBM = frozenset({
    "exp10", "expm1", "log1p", "logb", "cbrt", "hypot", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma",
    "tgamma", "fmod", "remainder", "fdim", "nextafter",
})  # fmt: skip

LIBM_SYMBOLS = tuple(sorted(LIBM | {f + "f" for f in LIBM}))


# glibc's libmvec: functions with vector variants, for float32 (`expf`) and float64.
MVEC: dict[str, int] = {
    "exp": 1, "exp2": 1, "exp10": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1,
    "log1p": 1, "sin": 1, "cos": 1, "tan": 1, "sinh": 1, "cosh": 1, "tanh": 1,
    "asin": 1, "acos": 1, "atan": 1, "asinh": 1, "acosh": 1, "atanh": 1, "cbrt": 1,
    "erf": 1, "erfc": 1, "pow": 2, "atan2": 2, "hypot": 2,
}  # fmt: skip

# Largest error of the vector variants in ulps (of the result's type) that the tests
# allow over the whole range; glibc documents <= 4 ulp for libmvec.
ULP_BOUND = 4.0

# libmvec's ISAs: (mangling letter, host feature, lanes for float32, lanes for float64)
_ISAS = (("d", "avx2", 8, 4), ("e", "avx512f", 16, 8))
_PREFIX = "tcc_mvec_"


class _VectorMath:
    """Which libmvec variants this process can call (filled once by `load_vector_math`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded = False
        self.variants: dict[str, tuple[tuple[int, str], ...]] = {}  # expf -> (lanes, name)
        self.enabled = True


_STATE = _VectorMath()


def load_vector_math() -> None:
    """Load libmvec and bind `tcc_mvec_<f>` to libm's `<f>` (once; after LLVM's native
    target is initialised). Without libmvec or AVX2 nothing is bound: scalar calls."""
    with _STATE.lock:
        if _STATE.loaded:
            return
        _STATE.loaded = True
        path = ctypes.util.find_library("mvec")
        libm_path = ctypes.util.find_library("m")
        if path is None or libm_path is None:
            return
        try:
            llvm.load_library_permanently(path)
            libm = ctypes.CDLL(libm_path)
        except (RuntimeError, OSError):
            return
        features = llvm.get_host_cpu_features()
        isas = [isa for isa in _ISAS if features.get(isa[1], False)]
        for name, arity in MVEC.items():
            for scalar, lanes_of in ((name + "f", 2), (name, 3)):
                found = []
                for isa in isas:
                    vector = f"_ZGV{isa[0]}N{isa[lanes_of]}{'v' * arity}_{scalar}"
                    if llvm.address_of_symbol(vector):
                        found.append((isa[lanes_of], vector))
                try:
                    address = ctypes.cast(getattr(libm, scalar), ctypes.c_void_p).value
                except AttributeError:
                    continue
                if found and address:
                    llvm.add_symbol(_PREFIX + scalar, address)
                    _STATE.variants[scalar] = tuple(found)


def vector_math_available() -> bool:
    """True when libmvec variants are bound in this process (and not switched off)."""
    load_vector_math()
    return _STATE.enabled and bool(_STATE.variants)


@contextmanager
def vector_math(enabled: bool) -> Iterator[None]:
    """Switch libmvec calls off (or on again) for the code built inside the block:
    the tests' way to exercise the portable scalar path on a host with libmvec. The
    switch is not part of any cache key: build with fresh Function names or no cache."""
    with _STATE.lock:
        before, _STATE.enabled = _STATE.enabled, enabled
    try:
        yield
    finally:
        with _STATE.lock:
            _STATE.enabled = before


class _CallAttributes(ir.values.AttributeSet):
    """Call-site attributes, string attributes included (llvmlite knows only a few)."""

    def add(self, name: str) -> None:
        set.add(self, name)


def intrinsic(module: ir.Module, name: str, ty: ir.Type, arity: int) -> ir.Function:
    """An overloaded float intrinsic `name.<ty>` taking `arity` arguments of type `ty`."""
    return module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [ty] * arity))


def vector_variants(module: ir.Module) -> list[ir.Function]:
    """The libmvec vector variants declared in `module` (by any emitter of it), in
    declaration order: what `@llvm.compiler.used` keeps for the vectoriser."""
    names = {vector for variants in _STATE.variants.values() for _, vector in variants}
    return [g for n, g in module.globals.items() if n in names]


class MathEmitter:
    """Emits calls of builtins into one module, declaring each callee once."""

    def __init__(self, module: ir.Module, builder: ir.IRBuilder) -> None:
        self.module = module
        self.builder = builder
        self.kept: dict[str, ir.Function] = {}  # libmvec functions the vectoriser may call
        # > 0 while emitting a value that must have the same bits wherever it is computed
        # (`scalar_math`): the scalar libm call, never a vector variant
        self.exact = 0

    def finish(self) -> None:
        """Keep the declared vector variants alive (`@llvm.compiler.used`) so the
        vectoriser may call them; once per module, after every call is emitted."""
        if "llvm.compiler.used" in self.module.globals:
            return
        # every variant declared in the module, by this emitter or a forked one
        self.kept = {g.name: g for g in vector_variants(self.module)}
        if not self.kept:
            return
        array = ir.ArrayType(ir.PointerType(), len(self.kept))
        used = ir.GlobalVariable(self.module, array, "llvm.compiler.used")
        used.linkage = "appending"
        used.section = "llvm.metadata"
        used.initializer = ir.Constant(array, list(self.kept.values()))

    def call(self, name: str, args: list[ir.Value], dtype: DType) -> ir.Value:
        b = self.builder
        if dtype is DType.FLOAT16:
            wide = [b.fpext(a, F32) for a in args]
            return b.fptrunc(self.call(name, wide, DType.FLOAT32), ir.HalfType())
        if name == "nextafter" and dtype is DType.FLOAT32:
            return self._callee(name + "f", 2, F32, args)
        ty = args[0].type
        if name == "exp" and dtype is DType.FLOAT32 and _STATE.enabled:
            return emit_expf(b, self.module, args[0])  # inline IR, vectorises (llvm_exp)
        if name in MVEC and dtype in (DType.FLOAT32, DType.FLOAT64) and not self.exact:
            vectorised = self._vector_call(name + ("f" if dtype is DType.FLOAT32 else ""), args)
            if vectorised is not None:
                return vectorised
        if name in INTRINSIC:
            return b.call(intrinsic(self.module, f"llvm.{INTRINSIC[name]}", ty, len(args)), args)
        if name in LIBM:
            symbol = name + ("f" if dtype is DType.FLOAT32 else "")
            return self._callee(symbol, len(args), ty, args)
        return self._composite(name, args, dtype)

    @contextmanager
    def scalar_math(self) -> Iterator[None]:
        """Calls emitted inside use libm's scalar functions only. libmvec's variants and
        the scalar function may differ in the last bit, and a loop mixes them (vector
        body, scalar remainder): a `max=`/`min=` candidate, or an operand of a float
        comparison, must round the same wherever it is computed, since a gradient finds
        the winners by recomputing the candidate and comparing it with the forward's
        result (docs: numerics)."""
        self.exact += 1
        try:
            yield
        finally:
            self.exact -= 1

    def _vector_call(self, scalar: str, args: list[ir.Value]) -> ir.Value | None:
        """A call of `tcc_mvec_<scalar>` that the vectoriser may widen; None when no
        libmvec variant is bound (module doc)."""
        if not vector_math_available() or scalar not in _STATE.variants:
            return None
        ty, arity = args[0].type, len(args)
        fn = self.module.globals.get(_PREFIX + scalar)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * arity), _PREFIX + scalar)
            fn.attributes.add("nounwind")
            fn.attributes.add("readnone")
        mangled = []
        for lanes, vector in _STATE.variants[scalar]:
            if vector not in self.kept:
                # another emitter of this module (an outlined parallel body) may have
                # declared it already: declare each once per module
                declared = self.module.globals.get(vector)
                if declared is None:
                    vty = ir.VectorType(ty, lanes)
                    declared = ir.Function(self.module, ir.FunctionType(vty, [vty] * arity), vector)
                self.kept[vector] = declared
            mangled.append(f"_ZGV_LLVM_N{lanes}{'v' * arity}_{_PREFIX}{scalar}({vector})")
        call = self.builder.call(fn, args)
        call.attributes = _CallAttributes()
        call.attributes.add(f'"vector-function-abi-variant"="{",".join(mangled)}"')
        return call

    def _callee(self, symbol: str, arity: int, ty: ir.Type, args: list[ir.Value]) -> ir.Value:
        fn = self.module.globals.get(symbol)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * arity), name=symbol)
            fn.attributes.add("nounwind")
        return self.builder.call(fn, args)

    def _composite(self, name: str, args: list[ir.Value], dtype: DType) -> ir.Value:
        b = self.builder
        ty = args[0].type
        one = ir.Constant(ty, 1.0)
        if name in ("rsqrt", "rcbrt", "rhypot"):
            return b.fdiv(one, self.call(name[1:], args, dtype))
        if name in ("norm3d", "norm4d", "rnorm3d", "rnorm4d"):
            wide = [b.fpext(a, F64) if ty != F64 else a for a in args]
            total = b.fmul(wide[0], wide[0])
            for a in wide[1:]:
                total = b.fadd(total, b.fmul(a, a))
            root = self.call("sqrt", [total], DType.FLOAT64)
            if name.startswith("r"):
                root = b.fdiv(ir.Constant(F64, 1.0), root)
            return b.fptrunc(root, ty) if ty != F64 else root
        if name == "normcdf":
            scaled = b.fmul(args[0], ir.Constant(ty, -math.sqrt(0.5)))
            return b.fmul(self.call("erfc", [scaled], dtype), ir.Constant(ty, 0.5))
        if name == "fdivide":
            return b.fdiv(args[0], args[1])
        raise InternalError(f"LLVM backend: no lowering for builtin {name}")
