"""Mirror of flash-attn 1.x: launch rules (`rules`), forward kernels (`kernels`), backward
(`backward`), the call as a whole (`mirror`).
"""
