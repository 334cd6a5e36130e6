"""Implementation mirrors: tile programs of what real attention libraries run.

The textbook programs (`hbmsim.algorithms`, `--algo`) are the algorithms as the papers write
them. A mirror is what one library launches for a given problem on a given GPU: its kernel
sequence, tiles and warps (chosen by the library's own rules), what it keeps in registers
rather than shared memory, the order its grid starts, GQA packing, padding to whole MMA tiles,
its split heuristics and the host-side operations of its Python wrapper. Every choice cites
the library's source in a comment; these plans are what measured timings are compared with.

One subpackage per library, each with its launch rules (`rules`), its kernels' tile programs
(`kernels`, `backward`) and the mirror that assembles a call (`mirror`): `pytorch/` (eager
attention), `flash_attn_1/`, `flash_attn_2/` (with `decoding`, Flash-Decoding as
`flash_attn_with_kvcache` runs it), `flash_attn_3/`; and `cupy/`, the validation run's vendor
baseline (not an `--impl`: kernels/validate.py uses it). `common` holds what every mirror
shares; `MIRRORS` below is the registry from `--impl NAME` to its mirror.
"""
