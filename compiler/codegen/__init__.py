"""The target seam, shared by every back end: the `Target` protocol and registry
(`target`), the loop IR's JSON form for cached artefacts (`loop_json`) and atomic,
owner-checked cache files (`cache_files`). The targets themselves are packages of their
own: `compiler.cpu` (the CPU schedule's decisions, LLVM through llvmlite, the CPU
runtime and compile cache) and `compiler.cuda` (the GPU mapping, CUDA C, NVRTC, the
driver and the emulation). Imports only `compiler.loops`."""
