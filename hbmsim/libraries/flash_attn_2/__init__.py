"""Mirror of flash-attn 2.x: launch rules (`rules`), kernels (`kernels`), the split-KV forward
and its combine (`splitkv`), the call (`mirror`), and Flash-Decoding through
`flash_attn_with_kvcache` (`decoding`).
"""
