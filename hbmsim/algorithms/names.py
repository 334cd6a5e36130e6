"""The textbook algorithms' names and the limits on their tiles, apart from their programs: what
the CLI's choices and the readers of files check against, without loading every program."""

ALGOS = ("standard", "fa1", "fa2", "split-kv", "fa2-kernel", "fa2-wmma-kernel", "standard-kernel")
# exactly what kernels/*.cu run
KERNEL_MIRRORS = ("fa2-kernel", "fa2-wmma-kernel", "standard-kernel")
FORWARD_ONLY = ("split-kv", *KERNEL_MIRRORS)
MATMUL_ALGOS = ("standard", "standard-kernel")  # tiles include the contraction chunk bd
MAX_TILE = 1 << 16
