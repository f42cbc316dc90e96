"""The polyhedral layer: the only package that imports islpy.

    ranges.infer_ranges(CheckedDef) -> RangedDef        TC range inference
    build.build_statements(RangedDef) -> (PolyStmt, ...) iteration domains and accesses

isl objects and isl text never leave this package, except `build`'s statement model,
which later poly passes consume.
"""

from __future__ import annotations
