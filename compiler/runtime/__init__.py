"""Running compiled defs: the CPU runtime (`native`: one native entry per def, its
compile cache and call plans) and the CUDA runtime (`cuda`, `cuda_device`).

Imports `poly` (lowering), `codegen` (targets), `frontend` and `loops`; the API layer
(`compiler.kernel`) imports it."""
