"""The tile-program API: what one CTA does, written once and interpreted several ways.

A *plan* is what a schedule makes of a problem on a GPU: the tensors in HBM and a sequence of
kernels. Each kernel has a grid of CTAs, the SRAM buffers each CTA declares (its shared-memory
layout, like a CUDA kernel's `extern __shared__` split into named pointers), and a *program*:
a Python function `program(ctx, cta)` that calls

    ctx.load(buffer, tensor, region)          one trip HBM -> SRAM, returns the tile (or None)
    ctx.store(buffer, tensor, region, tile)   one trip SRAM -> HBM
    ctx.compute(fn, *tiles, matmul=, vector=, exp=, out=)   math on tiles in SRAM
    ctx.loop(segments)                        a loop whose iterations come in classes

The interpretations (execute, trace, count; the engine later) are subclasses of `Ctx`. Values
only flow through `fn`, which only the executor calls, so control flow in a program may depend
on indices but never on values: that is what makes a trace without values complete.

CTA classes and loop segments are how counting stays O(classes) instead of O(N^2): a kernel's
grid is a tuple of `CtaClass`es, each a block of CTAs whose op sequences are identical up to
offsets, and `ctx.loop` receives its iterations already partitioned into such classes
(`range`s). Counting runs one representative per class with a weight; tracing runs them all;
tests check that both give the same totals, so a wrong partition cannot go unnoticed. So a
loop body's ops may depend on its index and the enclosing indices, never on how many
iterations ran before it (a counter kept across iterations): counting runs one iteration of
each segment, and the fast workload builder a few (classkeys.py), laying out the rest.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..errors import SramOverflowError
from ..gpu.hardware import Hardware
from ..gpu.occupancy import check_cta_fits
from ..problem.attention import Problem

Span = tuple[int, int]  # [start, stop) along one tensor axis
Region = tuple[Span, ...]


@dataclass(frozen=True)
class TensorSpec:
    """A tensor in HBM (or a tensor-shaped result the paper convention counts as HBM traffic)."""

    name: str
    shape: tuple[int, ...]
    itemsize: int
    role: str  # "input", "output" or "intermediate"
    description: str = ""

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


@dataclass(frozen=True)
class Buffer:
    """A named piece of a CTA's SRAM. `shape` is the largest tile it ever holds."""

    name: str
    shape: tuple[int, ...]
    itemsize: int
    registers: bool = False  # held in registers, not shared memory: outside the SRAM footprint

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


@dataclass(frozen=True)
class CtaClass:
    """A block of a kernel's grid: the product of one range per grid axis.

    All CTAs in a class run the same op sequence up to tensor offsets (same bytes, same flops,
    same loop trip counts), so counting may run the first and multiply by `size`.
    """

    axes: tuple[range, ...]

    @property
    def size(self) -> int:
        return math.prod(len(r) for r in self.axes)

    @property
    def representative(self) -> tuple[int, ...]:
        return tuple(r[0] for r in self.axes)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return itertools.product(*self.axes)


@dataclass(frozen=True)
class Kernel:
    """One kernel launch: grid (as CTA classes), SRAM layout and the per-CTA program."""

    name: str
    grid: tuple[CtaClass, ...]
    buffers: tuple[Buffer, ...]
    program: Callable[[Ctx, tuple[int, ...]], None]
    threads_per_cta: int = 128  # declared block size; the engine uses it for occupancy
    stages: int = 1  # software pipelining depth: >1 lets the next loads overlap this compute
    description: str = ""
    pass_: str = "fwd"  # "fwd" or "bwd": which pass of training the kernel belongs to
    # where its matmul flops run: tensor cores, or (scalar kernels) the fp32 FMA units
    tensor_cores: bool = True
    # scalar kernels: instructions each thread issues per FMA of its matmuls, the FMA itself
    # plus the shared-memory loads and type conversions that feed it, counted from the kernel's
    # source (an SM issues one instruction per scheduler per clock: a loop that issues 2.4
    # instructions per FMA runs its FMAs at most at 1 / 2.4 of the issue rate). 1: FMAs only
    instructions_per_fma: float = 1.0
    # scalar kernels whose loops were replayed on one warp scheduler (gpu/issue.py, from the
    # compiled code: kernels/sass_mix.py): scheduler cycles per FMA instruction with 1, 2, ...
    # warps on a scheduler, the last for more. With few warps a scheduler idles while its
    # warps wait on dependencies; the engine takes the value at the kernel's resident warps
    # in place of `instructions_per_fma`. (): every issue slot used
    cycles_per_fma_by_warps: tuple[float, ...] = ()
    # tensor-core kernels: their matmuls are warp-level MMA instructions (mma.sync, WMMA: the
    # sm80 code path flash-attn 1.x/2.x and kernels/flash_fwd_wmma.cu compile to), which run
    # at `Hardware.warp_mma_flops_per_s`, below the datasheet peak on Hopper (reached only by
    # warpgroup MMA, wgmma). False: the peak (cuBLAS picks wgmma kernels on Hopper)
    warp_mma: bool = False
    # shared-memory bytes the kernel's loops move per matmul flop (operand fragments, S, P and
    # accumulators kept in shared memory), counted from its source; each SM moves
    # `Hardware.smem_bytes_per_clock_per_sm`. 0: traffic the model leaves out
    smem_bytes_per_flop: float = 0.0
    # what the compiler gave each thread, when known (a GPU run records it from the loaded
    # kernel); with it, registers limit occupancy too. None: only SRAM, CTAs and threads do
    registers_per_thread: int | None = None
    # the order the GPU starts the CTAs: grid axes from slowest to fastest (a CUDA grid starts
    # blockIdx.x fastest), so CTAs of different classes interleave as they do on the device;
    # None: class after class, each in its own product order
    launch_order: tuple[int, ...] | None = None
    # warp-specialised kernels (FlashAttention-3 on Hopper): this many consumer warpgroups,
    # each owning 1/n of the CTA's rows, take the tensor cores in turn with asynchronous
    # warpgroup MMA (wgmma, at `Hardware.matrix_flops_per_s`), so one's softmax runs while
    # another multiplies, as far as the GPU's pipes allow (pipes.py); a producer warp issues
    # the loads (`stages` ahead). 0: the kernel's pipes' times add (one instruction stream)
    overlap_warpgroups: int = 0
    # thread-block clusters: `cluster` CTAs adjacent in launch order receive the tiles of the
    # tensors in `multicast` from one load (TMA multicast), so each such tile crosses the
    # SM-to-L2 path once per cluster: each CTA is charged 1/cluster of its bytes
    cluster: int = 1
    multicast: tuple[str, ...] = ()
    # atomic adds the CTA posts and goes on: a producer warp's TMA bulk reduce-add from
    # shared memory, or a `red` (atomicAdd whose result is unused) from registers. They move
    # the same bytes, but no compute waits for their round trip, as none waits for a store.
    # False: each compute waits for the atomic adds before it (the adds' results gate it)
    posted_atomics: bool = False
    # of the plan's `framework_ops`, how many the library's wrapper runs after the previous
    # kernel's launch (or the call's start) and before this one's, counted from its source;
    # None: not said (host.py then puts all of a call's framework ops before its first
    # kernel). Only a call timed alone waits for them (host.py)
    host_ops_before: int | None = None

    @property
    def sram_bytes(self) -> int:
        """SRAM footprint of one CTA: the sum of its declared shared-memory buffers."""
        return sum(b.nbytes for b in self.buffers if not b.registers)

    @property
    def n_ctas(self) -> int:
        return sum(c.size for c in self.grid)

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(f"kernel {self.name!r} declares no SRAM buffer {name!r}")


@dataclass(frozen=True)
class Tiles:
    """Tile sizes of a plan. bq x bk is the score tile (rows of Q x rows of K).

    For `standard` they are the output tile of its matmul kernels and `bd` the contraction
    chunk; for FlashAttention they are Br (bq) and Bc (bk) of the paper.
    """

    bq: int
    bk: int
    bd: int | None = None
    splits: int | None = None  # split-kv only: chunks the K/V sequence is cut into

    def describe(self) -> str:
        s = f"bq={self.bq}, bk={self.bk}"
        s += f", bd={self.bd}" if self.bd is not None else ""
        return s + (f", splits={self.splits}" if self.splits is not None else "")

    def to_dict(self) -> dict:
        d = {"bq": self.bq, "bk": self.bk}
        for name in ("bd", "splits"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return d


@dataclass(frozen=True)
class Plan:
    """A schedule applied to a problem on a GPU: tensors plus the kernel sequence."""

    algo: str
    problem: Problem
    hardware: Hardware
    tiles: Tiles
    tensors: dict[str, TensorSpec]
    kernels: tuple[Kernel, ...]
    notes: tuple[str, ...] = field(default=())
    # kernels that only the executor runs first, to make a backward-only plan's inputs (the
    # forward's saved tensors); never counted, traced or simulated
    prologue: tuple[Kernel, ...] = field(default=())
    # host-side framework operations one call runs besides launching these kernels
    # (allocations, views, host syncs such as `.item()`): implementation mirrors count them
    # from the library's wrapper code; the engine charges each `Hardware.host_op_s` on the
    # host, which issues work ahead of the GPU (see engine/simulation.py)
    framework_ops: int = 0
    # whether a framework issues this plan from Python (the implementation mirrors: a library
    # called from PyTorch): then every launch and framework op costs the host `host_op_s`. The
    # textbook programs are the algorithms on the GPU alone, with no host to wait for.
    host_issued: bool = False
    # inputs kept in another form than the (batch, heads, seq, head_dim) values naive attention
    # reads (a paged K/V cache: K and V scattered into pages, and its block table): tensor
    # name -> function of those logical inputs (a dict of arrays) giving the tensor's values.
    # The executor fills these tensors with them and checks the output against naive attention
    # on the logical inputs
    stored_inputs: dict = field(default_factory=dict)

    @property
    def sram_peak_bytes(self) -> int:
        return max(k.sram_bytes for k in self.kernels)

    def check_fits(self) -> None:
        """Raise SramOverflowError if any kernel's CTA needs more SRAM than a block may use,
        and a ConfigError naming the GPU's field if an SM cannot hold one of its CTAs'
        threads or registers."""
        cap = self.hardware.sram_bytes_per_block
        for k in self.kernels:
            if k.sram_bytes > cap:
                raise SramOverflowError(k.name, k.sram_bytes, cap, self.tiles.describe())
            check_cta_fits(self.hardware, k.threads_per_cta, k.name, k.registers_per_thread)


def as_region(region) -> Region:
    """Normalise a region: an int index i means the span (i, i + 1)."""
    return tuple((r, r + 1) if isinstance(r, int) else (int(r[0]), int(r[1])) for r in region)


def region_elements(region: Region) -> int:
    n = 1
    for a, b in region:
        n *= b - a
    return n


class Ctx:
    """Base of every interpretation. Subclasses override the `_on_*` hooks.

    `compress_loops`: True for counting (one representative iteration per segment, weighted),
    False for interpretations that must see every iteration.
    """

    compress_loops = False

    def __init__(self, plan: Plan):
        self.plan = plan
        self.kernel: Kernel | None = None
        self.cta: tuple[int, ...] = ()
        self.weight = 1

    # -- the API programs call ------------------------------------------------------------
    def load(self, buf: str, tensor: str, region):
        region = as_region(region)
        return self._on_transfer("load", buf, tensor, region, None)

    def store(self, buf: str, tensor: str, region, value=None) -> None:
        region = as_region(region)
        self._on_transfer("store", buf, tensor, region, value)

    def atomic_add(self, buf: str, tensor: str, region, value=None) -> None:
        """One trip SRAM -> L2: add a tile into a tensor (read-modify-write where it lives).
        Counted as a read and a write of its bytes (paper convention)."""
        region = as_region(region)
        self._on_transfer("atomic", buf, tensor, region, value)

    def compute(
        self, fn, *args, matmul: int = 0, vector: int = 0, exp: int = 0, out: str | None = None
    ):
        return self._on_compute(fn, args, matmul, vector, exp, out)

    def loop(self, segments: Sequence[range]) -> Iterator[int]:
        if not self.compress_loops:
            for seg in segments:
                yield from seg
            return
        outer = self.weight
        for seg in segments:
            if len(seg) == 0:
                continue
            self.weight = outer * len(seg)
            try:
                yield seg[0]
            finally:
                self.weight = outer

    def dropout_keep(self, b: int, h: int, rows: Span, cols: Span):
        """The dropout keep-mask of a tile, regenerated on chip (no HBM traffic). Values only."""
        return None

    # -- hooks ----------------------------------------------------------------------------
    def _on_transfer(self, kind, buf, tensor, region, value):
        raise NotImplementedError

    def _on_compute(self, fn, args, matmul, vector, exp, out):
        raise NotImplementedError

    def begin_kernel(self, index: int, kernel: Kernel) -> None:
        self.kernel = kernel

    def begin_cta(self, cta: tuple[int, ...], weight: int) -> None:
        self.cta = cta
        self.weight = weight


def launch_sequence(kernel: Kernel) -> Iterator[tuple[int, ...]]:
    """Every CTA of a kernel in the order the GPU starts them (see `Kernel.launch_order`)."""
    if kernel.launch_order is None:
        for cls in kernel.grid:
            yield from cls
        return
    order = kernel.launch_order
    ctas = [cta for cls in kernel.grid for cta in cls]
    yield from sorted(ctas, key=lambda c: tuple(c[a] for a in order))


def run_plan(ctx: Ctx, every_cta: bool, kernels: tuple[Kernel, ...] | None = None) -> None:
    """Drive `ctx` through every kernel of its plan (or the given ones): all CTAs in launch
    order, or one per class (weighted)."""
    for index, kernel in enumerate(ctx.plan.kernels if kernels is None else kernels):
        ctx.begin_kernel(index, kernel)
        if every_cta:
            for cta in launch_sequence(kernel):
                ctx.begin_cta(cta, 1)
                kernel.program(ctx, cta)
            continue
        for cls in kernel.grid:
            ctx.begin_cta(cls.representative, cls.size)
            kernel.program(ctx, cls.representative)
