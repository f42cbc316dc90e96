"""The CUDA target: the GPU mapping of the loop IR and CUDA C.

Mapping: lowering a schedule's nests to GPU bands (`gpu_lower`), bands to grids and
blocks (`cuda_map`), split reductions across blocks (`cuda_split`), warp reductions
(`cuda_warp`), thread tiles (`cuda_tile`), 32-bit index versions (`cuda_width`).

Code generation and running: CUDA C (`cuda`, `cuda_preamble`), its options
(`cuda_options`), NVRTC and the driver API through cuda-bindings (`cuda_driver`), the CPU
emulation of the generated source (`cuda_emulation`) and the static per-kernel report
(`cuda_report`). Nothing here imports `cuda` (NVIDIA's bindings) at module level.
"""
