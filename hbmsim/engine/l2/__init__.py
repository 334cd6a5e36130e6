"""The L2 model: a tile-granular LRU in a fixed logical order (`lru`), and the exact shortcuts
that decide the hits of long kernels from a few of their waves (`fast`, `runs`, `lockstep`,
`classwave`).
"""
