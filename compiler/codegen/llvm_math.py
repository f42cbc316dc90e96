"""Math builtins for the LLVM backend: each one an LLVM intrinsic, a libm call of the
right precision (`expf` for float32, `exp` for float64), or a short composite.

float16 arguments are widened to float32 for the call and the result narrowed back.
The composites follow the reference in `compiler.loops.mathref`: `rsqrt(x) = 1/sqrt(x)`,
`norm3d` and friends sum squares in float64 (no overflow for float32 inputs),
`normcdf(x) = erfc(-x/sqrt(2))/2`.
"""

from __future__ import annotations

import math

from llvmlite import ir

from compiler.frontend.diagnostics import InternalError
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


def intrinsic(module: ir.Module, name: str, ty: ir.Type, arity: int) -> ir.Function:
    """An overloaded float intrinsic `name.<ty>` taking `arity` arguments of type `ty`."""
    return module.declare_intrinsic(name, [ty], ir.FunctionType(ty, [ty] * arity))


class MathEmitter:
    """Emits calls of builtins into one module, declaring each callee once."""

    def __init__(self, module: ir.Module, builder: ir.IRBuilder) -> None:
        self.module = module
        self.builder = builder

    def call(self, name: str, args: list[ir.Value], dtype: DType) -> ir.Value:
        b = self.builder
        if dtype is DType.FLOAT16:
            wide = [b.fpext(a, F32) for a in args]
            return b.fptrunc(self.call(name, wide, DType.FLOAT32), ir.HalfType())
        if name == "nextafter" and dtype is DType.FLOAT32:
            return self._callee(name + "f", 2, F32, args)
        ty = args[0].type
        if name in INTRINSIC:
            return b.call(intrinsic(self.module, f"llvm.{INTRINSIC[name]}", ty, len(args)), args)
        if name in LIBM:
            symbol = name + ("f" if dtype is DType.FLOAT32 else "")
            return self._callee(symbol, len(args), ty, args)
        return self._composite(name, args, dtype)

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
