"""Mirror of flash-attn 3 (Hopper, `hopper/`): tile rules and heuristics (`rules`) and the
warp-specialised forward call (`mirror`).
"""
