"""The sidebar's fields and the frozen settings they make: what the app's URL and widgets
hold, and how a URL value is read (plain decimals only, then the field's range).

Everything cached is keyed by the frozen `Settings`, so a URL reproduces a view. The URL's
keys are the field names (`pass` for the pass), with the aliases in URL_ALIASES.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hbmsim import PRESETS, Hardware, Problem, get_hardware
from hbmsim.engine.timing import DEFAULT_TIMING, TIMINGS
from hbmsim.errors import ConfigError
from hbmsim.files.numbers import parse_number
from hbmsim.problem.attention import ITEMSIZE, MAX_BATCH, MAX_HEAD_DIM, MAX_HEADS, MAX_SEQ, PASSES
from hbmsim.problem.models import MODELS, get_model

CUSTOM = "custom"  # the model choice of a shape set by hand
FIRST_ROW = 100  # the query row the Walkthrough's row panel follows until a user moves it
FLASH_ALGOS = ("fa2", "fa1", "split-kv")
# library mirrors the sidebar offers beside the textbook algorithms (hbmsim.libraries)
FLASH_IMPLS = ("flash-attn-2", "flash-attn-3")


@dataclass(frozen=True)
class Field:
    label: str
    kind: type
    default: object
    lo: float | None = None
    hi: float | None = None
    choices: tuple = ()
    help: str = ""


FIELDS: dict[str, Field] = {
    "gpu": Field("GPU preset", str, "h100-sxm", choices=tuple(PRESETS)),
    "sram_kib": Field(
        "SRAM per SM (KiB, 0 = preset)",
        int,
        0,
        0,
        4096,
        help="shared memory per SM; 0 keeps the preset's",
    ),
    "hbm_gbps": Field(
        "HBM bandwidth (GB/s, 0 = preset)", int, 0, 0, 100_000, help="0 keeps the preset's"
    ),
    "batch": Field("batch", int, 1, 1, MAX_BATCH),
    "model": Field(
        "model (sets heads, kv heads, head dim)",
        str,
        CUSTOM,
        choices=(CUSTOM, *MODELS),
        help="a model's attention shape, from its published configuration (hbmsim.models); "
        "changing heads, kv heads or head dim afterwards makes it custom",
    ),
    "heads": Field("heads", int, 8, 1, MAX_HEADS),
    "kv_heads": Field("kv heads (GQA/MQA; must divide heads)", int, 8, 1, MAX_HEADS),
    "decode": Field(
        "decode: one query token against a KV cache",
        bool,
        False,
        help="sets the query length to 1; the key/value length is the KV cache",
    ),
    "seq_q": Field("query length", int, 1024, 1, MAX_SEQ),
    "seq_k": Field("key/value length (KV cache when decoding)", int, 1024, 1, MAX_SEQ),
    "head_dim": Field("head dim", int, 64, 1, MAX_HEAD_DIM),
    "dtype": Field("dtype", str, "fp16", choices=tuple(ITEMSIZE)),
    "causal": Field("causal", bool, False),
    "dropout": Field("dropout", float, 0.0, 0.0, 0.95),
    "pass_": Field(
        "pass",
        str,
        "fwd",
        choices=PASSES,
        help="forward, backward (given the forward's saved tensors), or both",
    ),
    "algo": Field(
        "flash algorithm or implementation",
        str,
        "fa2",
        choices=FLASH_ALGOS + FLASH_IMPLS,
        help="a textbook algorithm (fa2, fa1, split-kv) or what a library runs "
        "(flash-attn-2, flash-attn-3: Hopper only)",
    ),
    "bq": Field("bq, rows of Q per tile (0 = default)", int, 0, 0, 4096),
    "bk": Field("bk, rows of K/V per tile (0 = default)", int, 0, 0, 4096),
    "splits": Field(
        "split-kv splits (0 = default)",
        int,
        0,
        0,
        4096,
        help="chunks of the KV cache, split-kv only",
    ),
    "timing": Field(
        "timing (which time a library's call reports)",
        str,
        DEFAULT_TIMING,
        choices=tuple(TIMINGS),
        help="; ".join(f"{k}: {v}" for k, v in TIMINGS.items())
        + ". A textbook algorithm has no host: the three are equal for it.",
    ),
}
SECTIONS = {
    "GPU": ("gpu", "sram_kib", "hbm_gbps"),
    "Problem": (
        "batch",
        "model",
        "heads",
        "kv_heads",
        "decode",
        "seq_q",
        "seq_k",
        "head_dim",
        "dtype",
        "causal",
        "dropout",
        "pass_",
    ),
    "Algorithm and tiles": ("algo", "bq", "bk", "splits", "timing"),
}


@dataclass(frozen=True)
class Settings:
    gpu: str
    sram_kib: int
    hbm_gbps: int
    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    dtype: str
    causal: bool
    dropout: float
    algo: str
    bq: int
    bk: int
    decode: bool = False
    pass_: str = "fwd"
    splits: int = 0
    model: str = CUSTOM  # a label: heads, kv_heads and head_dim carry the shape
    timing: str = DEFAULT_TIMING

    def problem(self) -> Problem:
        """Raises ConfigError naming the field when the combination is invalid. A model with a
        sliding window (mistral-7b) applies it past its window, as `--model` does; the
        sidebar says so under the model (`window_note`). A model alternating local and global
        layers (gemma-2) is drawn as its global layer, with its softmax scale; the note under
        the model says so. An MLA model (deepseek-*) brings its latent K/V (head_dim_v,
        latent_kv), which no sidebar field edits."""
        mask = {"causal": self.causal, **self._mask(), **self._latent()}
        return Problem(
            batch=self.batch,
            heads=self.heads,
            kv_heads=self.kv_heads,
            seq_q=1 if self.decode else self.seq_q,
            seq_k=self.seq_k,
            head_dim=self.head_dim,
            dtype=self.dtype,
            dropout=self.dropout,
            pass_=self.pass_,
            **({} if self.model == CUSTOM else get_model(self.model).scale()),
            **mask,
        )

    def _mask(self) -> dict:
        return {} if self.model == CUSTOM else get_model(self.model).attention(self.seq_k)

    def _latent(self) -> dict:
        if self.model == CUSTOM:
            return {}
        shape = get_model(self.model).shape()
        return {k: shape[k] for k in ("head_dim_v", "latent_kv") if k in shape}

    def window_note(self) -> str:
        """One line on the model's sliding window at this length, or on its latent K/V ("" for
        a model with neither)."""
        if self.model == CUSTOM:
            return ""
        model = get_model(self.model)
        if model.alternating:
            return self._layers_note(model)
        if model.latent_kv:
            return model.latent_note()
        note = model.window_note(self.seq_k)
        if note and self._mask() and not self.causal:
            note += " (the causal box is left as you set it; the model's window sets causal)"
        return note

    def _layers_note(self, model) -> str:
        """Which layer kind the pages draw for a model alternating local and global layers
        (the global one: `attention()` sets no window), with the split and the soft-cap."""
        local, glob = model.layer_kinds(self.seq_k)
        window = local.mask.get("window_left")
        local_says = (
            f"causal, window {window:,} left"
            if window is not None
            else f"the context fits in their {model.local_window:,}-key window, so they "
            "match the global ones here"
        )
        return (
            f"{model.layers_note()}. Drawn: a global layer ({glob.layers} of {model.layers}); "
            f"the {local.layers} local layers: {local_says}. `hbmsim simulate --model "
            f"{model.name}` simulates both and the per-model total. {model.softcap_note()}."
        )

    def hardware(self) -> Hardware:
        """The preset with the sidebar's overrides, refused in the sidebar's own terms."""
        hw = get_hardware(self.gpu)
        changes = {}
        if self.sram_kib:
            reserve_kib = -(-(hw.sram_bytes_per_sm - hw.sram_bytes_per_block) // 1024)
            if self.sram_kib <= reserve_kib:  # no room left for a thread block's own tiles
                raise ConfigError(
                    "SRAM per SM",
                    f"must be 0 or at least {reserve_kib + 1} KiB: the {self.gpu} keeps "
                    f"{reserve_kib} KiB per thread block for the system (got {self.sram_kib} KiB)",
                )
            changes["sram_bytes_per_sm"] = self.sram_kib * 1024
        if self.hbm_gbps:
            changes["hbm_bytes_per_s"] = self.hbm_gbps * 1e9
        return hw.with_overrides(**changes) if changes else hw

    @property
    def tiles(self) -> tuple[int | None, int | None]:
        return (self.bq or None, self.bk or None)

    def plan_args(self, algo: str) -> dict:
        """build_plan/simulate keyword arguments for `algo`, a textbook algorithm or a library
        mirror (tiles apply to the sidebar's choice)."""
        args: dict = {"impl": algo} if algo in FLASH_IMPLS else {"algo": algo}
        if algo != self.algo:
            return args
        args |= {"bq": self.tiles[0], "bk": self.tiles[1]}
        if algo == "split-kv" and self.splits:
            args["splits"] = self.splits
        return args

    def to_query(self) -> dict[str, str]:
        """The URL's parameters: every field under its URL key."""
        return {
            url_key(k): str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in dataclasses.asdict(self).items()
        }


def url_key(name: str) -> str:
    """A field's key in the URL: its name, but `pass` for the pass (`pass_` in Python)."""
    return "pass" if name == "pass_" else name


# other spellings a URL may use, each to the fields it sets: the CLI's flags (--pass,
# --kv-heads, --seq for both lengths, --impl) and the Python name of the pass
URL_ALIASES: dict[str, tuple[str, ...]] = {
    "pass_": ("pass_",),
    "seq": ("seq_q", "seq_k"),
    "seq-q": ("seq_q",),
    "seq-k": ("seq_k",),
    "kv-heads": ("kv_heads",),
    "head-dim": ("head_dim",),
    "impl": ("algo",),
}
STREAMLIT_KEYS = ("embed", "embed_options")  # Streamlit's own URL keys: not ours to name


def url_fields(key: str) -> tuple[str, ...]:
    """The fields a URL key sets (none for a key the app does not know)."""
    if key in URL_ALIASES:
        return URL_ALIASES[key]
    if key == "pass":
        return ("pass_",)
    return (key,) if key in FIELDS else ()


def short_label(name: str) -> str:
    """A field's label without its parenthesis: how messages name it."""
    return FIELDS[name].label.split(" (")[0]


def out_of_range(name: str, value, hi: float | None = None) -> str | None:
    """Why a number is not allowed in field `name` (its range, or `hi` in its place), in one
    line naming the field and the range; None when it is allowed."""
    f = FIELDS[name]
    top = f.hi if hi is None else hi
    if f.lo <= value <= top:
        return None
    number = "a whole number" if f.kind is int else "a number"
    lo, top = (f"{f.lo:,}", f"{top:,}") if f.kind is int else (f"{f.lo:g}", f"{top:g}")
    return f"{short_label(name)} must be {number} from {lo} to {top}"


def default_values() -> dict:
    """Each sidebar field's value before a user touches anything, by field name."""
    return {name: f.default for name, f in FIELDS.items()}


def default_settings() -> Settings:
    """The sidebar's settings before a user touches anything (no URL parameters)."""
    return Settings(**default_values())


def parse(name: str, text: str):
    """A URL value for field `name`, or raise ValueError saying what is allowed.

    URL values are user input like an uploaded file's: numbers spelled as the command line and
    explore specs spell them (hbmsim/files/numbers.py: no "nan", "1_000" or other scripts'
    digits, refused with the same words), then the field's own range. The
    combination (kv heads dividing heads, tiles fitting SRAM) is checked where the problem is
    built, and shown as one line by `guarded`."""
    f = FIELDS[name]
    if f.choices:
        if text not in f.choices:
            raise ValueError(f"{short_label(name)} must be one of {', '.join(f.choices)}")
        return text
    if f.kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{short_label(name)} must be true or false")
        return text.lower() == "true"
    try:
        value = parse_number(text, integer=f.kind is int)
    except ValueError as exc:  # the number parser's words, then this field's range
        range_line = out_of_range(name, f.lo - 1)
        allowed = range_line.split(" must be ", 1)[1]
        raise ValueError(f"{short_label(name)} {exc}: {allowed}") from None
    why = out_of_range(name, value)
    if why:
        raise ValueError(why)
    return value
