"""Textbook tile programs: the algorithms as the papers write them, with free tiles (`--algo`).

One module per family: `standard` (eager attention's kernel sequence), `flash` (FA1 and FA2
forward), `flash_bwd` (their backward), `decode` (split-KV with its combine); `kernels` holds
the matmul and elementwise kernels they share, `blocks` and `tilemath` the block arithmetic,
`loop_costs` the per-FMA instruction counts of scalar loops; `kernel_fa2` and `kernel_naive`
are the programs of our own CUDA kernels (kernels/*.cu). `registry.make_plan` is the one entry
point from an algorithm's name to its plan.
"""
