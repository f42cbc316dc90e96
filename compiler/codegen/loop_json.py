"""The loop IR as JSON data, for the compile cache's entries (`cpu.cache`).

Requires: a `loops.ir.Function` (frozen dataclasses of `loops.ir`).
Ensures:  `function_to_json(f)` is JSON data (tuples stand for arrays),
`function_from_json(data)` the same Function again, before or after a round trip
through JSON text, or CacheFormatError for anything else (a cache file is input).

Format: `{"nodes": [row, ...], "root": i}`: each distinct node once (buffers recur in
every Load and Store), children before parents; a row is `[class, field, ...]` with
nodes as row numbers, enums as their values and tuples as lists.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from compiler.codegen.cache_files import CacheFormatError
from compiler.diagnostics import InternalError
from compiler.loops import ir as L

# {"nodes": [row, ...], "root": i}: each distinct node once (buffers recur in every
# Load and Store), children before parents; a row is [class, field, ...] with nodes
# as row numbers, enums as their values and tuples as lists.

_NODES: dict[str, type[L.Node]] = {
    cls.__name__: cls
    for cls in vars(L).values()
    if isinstance(cls, type) and issubclass(cls, L.Node) and dataclasses.is_dataclass(cls)
}
_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    for cls in _NODES.values()
}
_PLAIN = frozenset({"name", "var", "fn", "step", "size_params"})  # and Const.value
_ENUM_OF: dict[str, type[enum.Enum]] = {
    "dtype": L.DType,
    "kind": L.LoopKind,
    "role": L.Role,
    "op": L.BinOp,
}


def function_to_json(f: L.Function) -> Any:
    """`f` as JSON data (module doc; tuples stand for JSON arrays): `function_from_json`
    inverts it exactly, before or after a round trip through JSON text."""
    rows: list[list[Any]] = []
    by_row: dict[tuple[Any, ...], int] = {}  # exact: Const(1) and Const(1.0) stay apart
    by_id: dict[int, tuple[L.Node, int]] = {}
    enum_type = enum.Enum

    def node(n: L.Node) -> int:
        seen = by_id.get(id(n))
        if seen is not None:
            return seen[1]
        cls = type(n)
        row: list[Any] = [cls.__name__]
        for name, plain in _SPEC[cls]:
            value = getattr(n, name)
            if plain or value is None:
                row.append(value)
            elif type(value) is tuple:
                row.append(tuple([node(v) for v in value]))
            elif isinstance(value, enum_type):
                row.append(value.value)
            else:
                row.append(node(value))
        key = tuple(row)
        if cls is L.Const:
            key += (type(n.value).__name__,)  # type: ignore[attr-defined]
        found = by_row.get(key)
        if found is None:
            found = by_row[key] = len(rows)
            rows.append(row)
        by_id[id(n)] = (n, found)
        return found

    root = node(f)
    return {"nodes": rows, "root": root}


def _plain(cls: type, name: str) -> bool:
    return name in _PLAIN if name != "value" else cls is L.Const


# per node class: (field, whether it is written as it is) for function_to_json
_SPEC: dict[type, tuple[tuple[str, bool], ...]] = {
    cls: tuple((name, _plain(cls, name)) for name in names) for cls, names in _FIELDS.items()
}


def function_from_json(data: Any) -> L.Function:
    """The Function `function_to_json` encoded; CacheFormatError on anything else."""
    try:
        objs: list[L.Node] = []
        count = 0

        def node(i: Any) -> L.Node:
            if type(i) is not int or not 0 <= i < count:
                raise ValueError(f"bad node reference {i!r}")
            return objs[i]

        for row in data["nodes"]:
            cls = _NODES[row[0]]
            spec = _DECODE[cls]
            args = []
            for (kind, enum_type), value in zip(spec, row[1:], strict=True):
                if kind is _PLAIN_FIELD:
                    args.append(tuple(value) if type(value) is list else value)
                elif kind is _ENUM_FIELD:
                    args.append(enum_type(value))
                elif value is None:
                    args.append(None)
                elif type(value) is list or type(value) is tuple:
                    args.append(tuple([node(v) for v in value]))
                else:
                    args.append(node(value))
            objs.append(cls(*args))
            count += 1
        f = objs[data["root"]]
    except (KeyError, IndexError, TypeError, ValueError, InternalError) as err:
        raise CacheFormatError(f"bad loop IR: {err!r}") from None
    if not isinstance(f, L.Function):
        raise CacheFormatError("metadata holds no Function")
    return f


# per node class and field: how function_from_json decodes it (a plain value, an enum
# of the given type, or node references)
_PLAIN_FIELD, _ENUM_FIELD, _NODE_FIELD = "plain", "enum", "node"
_DECODE: dict[type, tuple[tuple[str, Any], ...]] = {
    cls: tuple(
        (_PLAIN_FIELD, None)
        if _plain(cls, name)
        else (_ENUM_FIELD, L.UnaryOp if cls is L.Unary else _ENUM_OF[name])
        if name in _ENUM_OF
        else (_NODE_FIELD, None)
        for name in names
    )
    for cls, names in _FIELDS.items()
}


__all__ = ["function_from_json", "function_to_json"]
