"""CUDA kernels whose loop structure is a tile program of hbmsim, and the tools around them:
`build` (nvcc compile checks and the CPU emulation harness), `runner` (CuPy launches on a GPU),
`validate` (the GPU measurement run)."""
