"""The app's shared state: sidebar inputs (mirrored in the URL) and cached hbmsim calls.

Pages call `settings()` and the cached functions here; they never simulate or build figures
themselves. Everything cached is keyed by the frozen `Settings`, so a URL reproduces a view.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass

import streamlit as st

from hbmsim import PRESETS, Hardware, HbmsimError, Problem, get_hardware
from hbmsim.errors import ConfigError
from hbmsim.files.numbers import parse_number
from hbmsim.problem.attention import ITEMSIZE, MAX_BATCH, MAX_HEAD_DIM, MAX_HEADS, MAX_SEQ, PASSES
from hbmsim.problem.models import MODELS

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
    "Algorithm and tiles": ("algo", "bq", "bk", "splits"),
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

    def problem(self) -> Problem:
        """Raises ConfigError naming the field when the combination is invalid."""
        return Problem(
            batch=self.batch,
            heads=self.heads,
            kv_heads=self.kv_heads,
            seq_q=1 if self.decode else self.seq_q,
            seq_k=self.seq_k,
            head_dim=self.head_dim,
            dtype=self.dtype,
            causal=self.causal,
            dropout=self.dropout,
            pass_=self.pass_,
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
        return {
            k: str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in dataclasses.asdict(self).items()
        }


def default_values() -> dict:
    """Each sidebar field's value before a user touches anything, by field name."""
    return {name: f.default for name, f in FIELDS.items()}


def default_settings() -> Settings:
    """The sidebar's settings before a user touches anything (no URL parameters)."""
    return Settings(**default_values())


def _parse(name: str, text: str):
    """A URL value for field `name`, or raise ValueError saying what is allowed.

    URL values are user input like an uploaded file's: numbers spelled as the command line and
    explore specs spell them (hbmsim/files/numbers.py: no "nan", "1_000" or other scripts'
    digits, refused with the same words), then the field's own range. The combination (kv
    heads dividing heads, tiles fitting SRAM) is checked where the problem is built, and shown
    as one line by `guarded`."""
    f = FIELDS[name]
    if f.choices:
        if text not in f.choices:
            raise ValueError(f"{name} must be one of {', '.join(f.choices)}")
        return text
    if f.kind is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{name} must be true or false")
        return text.lower() == "true"
    number = "a whole number" if f.kind is int else "a number"
    lo, hi = (f"{f.lo:,}", f"{f.hi:,}") if f.kind is int else (f"{f.lo:g}", f"{f.hi:g}")
    try:
        value = parse_number(text, integer=f.kind is int)
    except ValueError as exc:  # the number parser's words, then this field's range
        raise ValueError(f"{f.label} {exc}: {number} from {lo} to {hi}") from None
    if not f.lo <= value <= f.hi:
        raise ValueError(f"{f.label} must be {number} from {lo} to {hi}")
    return value


def _load_query_params() -> list[str]:
    """Once per session: URL parameters become the widgets' starting values; a bad one is
    named in one line (its value cut to 40 characters) and the widget keeps its default."""
    problems = []
    for name, text in st.query_params.items():
        if name not in FIELDS:
            continue
        try:
            st.session_state[f"w_{name}"] = _parse(name, text)
        except ValueError as exc:
            shown = text if len(text) <= 40 else text[:40] + "..."
            problems.append(f"URL parameter {name}={shown!r} ignored: {exc}")
    model = MODELS.get(st.session_state.get("w_model"))
    if model is not None:  # the model sets its shape; a URL value that disagrees is named
        for name, value in model.shape().items():
            given = st.session_state.get(f"w_{name}")
            if name in st.query_params and given != value:
                problems.append(
                    f"URL parameter {name}={given} ignored: model {model.name} sets {value}"
                )
            st.session_state[f"w_{name}"] = value
    return problems


def _model_chosen() -> None:
    """The model selectbox's callback: its shape goes into heads, kv heads and head dim."""
    model = MODELS.get(st.session_state.get("w_model"))
    if model is not None:
        for name, value in model.shape().items():
            st.session_state[f"w_{name}"] = value


def _shape_edited() -> None:
    """A shape field's callback: a shape that is no longer the model's is a custom one."""
    model = MODELS.get(st.session_state.get("w_model"))
    if model is not None and any(
        st.session_state.get(f"w_{name}") != value for name, value in model.shape().items()
    ):
        st.session_state["w_model"] = CUSTOM


_CALLBACKS = {
    "model": _model_chosen,
    "heads": _shape_edited,
    "kv_heads": _shape_edited,
    "head_dim": _shape_edited,
}


def sidebar_ui() -> Settings:
    """Draws the sidebar; returns the settings and mirrors them into the URL."""
    st.session_state[SHOWN_KEY] = set()  # a new run: no error shown yet
    if "url_loaded" not in st.session_state:
        st.session_state["url_problems"] = _load_query_params()
        st.session_state["url_loaded"] = True
    for problem in st.session_state.get("url_problems", []):
        st.sidebar.warning(problem)
    values = {}
    for section, names in SECTIONS.items():
        st.sidebar.subheader(section)
        for name in names:
            values[name] = _widget(name, FIELDS[name])
    s = Settings(**values)
    st.query_params.from_dict(s.to_query())
    return s


def _widget(name: str, f: Field):
    key = f"w_{name}"
    if key not in st.session_state:
        st.session_state[key] = f.default
    on_change = _CALLBACKS.get(name)
    if f.choices:
        return st.sidebar.selectbox(
            f.label, f.choices, key=key, help=f.help or None, on_change=on_change
        )
    if f.kind is bool:
        return st.sidebar.checkbox(f.label, key=key, help=f.help or None)
    if f.kind is float:
        return float(st.sidebar.number_input(f.label, float(f.lo), float(f.hi), step=0.05, key=key))
    disabled = name == "seq_q" and bool(st.session_state.get("w_decode"))  # decode: seq_q = 1
    return int(
        st.sidebar.number_input(
            f.label,
            int(f.lo),
            int(f.hi),
            step=1,
            key=key,
            help=f.help or None,
            disabled=disabled,
            on_change=on_change,
        )
    )


def settings() -> Settings:
    return st.session_state["settings"]


# hbmsim's errors name a field as the API and the CLI spell it; the page names it by its
# sidebar label (the part before any parenthesis), so "kv_heads: must divide heads (8); got 3"
# reads "kv heads: must divide heads (8); got 3"
_FIELD_WORDS = re.compile(r"\b(" + "|".join(n for n in FIELDS if "_" in n) + r")\b")


def _label(name: str) -> str:
    return FIELDS[name].label.split(" (")[0]


def user_message(text: str) -> str:
    """An error's text with every field named by its sidebar label."""
    return _FIELD_WORDS.sub(lambda m: _label(m.group(1)), text)


def show_errors(messages, relabel: bool = True) -> bool:
    """Each distinct error once a page, with the callers it came from in front ((who, text)
    pairs; who may be ""): the same refusal from standard and fa2 is one line, and a part of
    the page that meets a refusal already shown above says nothing more. Whether anything
    was said. `relabel=False` keeps field names as written: an error about a file or a spec
    the user wrote names its fields as the file does (`axes.head_dim`), not by the sidebar's
    labels."""
    shown = st.session_state.setdefault(SHOWN_KEY, set())
    by_text: dict[str, list[str]] = {}
    for who, text in messages:
        by_text.setdefault(user_message(str(text)) if relabel else str(text), []).append(who)
    said = False
    for text, whos in by_text.items():
        if text in shown:
            continue
        shown.add(text)
        named = " and ".join(w for w in whos if w)
        st.error(f"{named}: {text}" if named else text)
        said = True
    return said


SHOWN_KEY = "_errors_shown"  # the errors this run has shown (cleared by sidebar_ui each run)


def errors_shown() -> bool:
    """Whether this run has shown an error yet."""
    return bool(st.session_state.get(SHOWN_KEY))


def guarded(fn, *args, default=None, what: str | None = None, relabel: bool = True):
    """fn(*args), or `default` after showing the user's error as one line (never a traceback;
    `relabel` as show_errors').
    `what`: fn takes a progress callback (done, total, what it computes) last, drawn as a
    progress bar headed `what` once fn has taken PROGRESS_AFTER_S (cached steps draw none)
    and removed when fn returns."""
    slot = st.empty() if what else None
    began = time.perf_counter()

    def progress(done: int, total: int, step: str) -> None:
        if time.perf_counter() - began >= PROGRESS_AFTER_S:
            slot.progress(done / max(total, 1), text=f"{what}: {step} ({done + 1} of {total})")

    try:
        return fn(*args, progress) if slot is not None else fn(*args)
    except HbmsimError as exc:
        show_errors([("", exc)], relabel=relabel)
        return default
    finally:
        if slot is not None:
            slot.empty()


PROGRESS_AFTER_S = 0.25  # a step that takes longer shows a progress bar (warm reruns do not)
