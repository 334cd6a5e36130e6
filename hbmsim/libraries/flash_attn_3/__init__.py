"""Mirror of flash-attn 3 (Hopper, `hopper/`): tile rules and heuristics (`rules`), the
warp-specialised forward call (`mirror`), and the backward's rules (`bwd_rules`) and kernels
(`backward`).
"""
