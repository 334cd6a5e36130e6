"""The app's shared state: the sidebar (mirrored in the URL) and how refusals are shown.

Pages call `settings()` and the cached functions of data.py; they never simulate or build
figures themselves. The sidebar offers only what can work (choices.py asks hbmsim which
algorithms and passes run the other settings), checks every number against its field's one
range (a value outside it is put back, with one line naming the field and the range), and
reads the URL's keys, their aliases, and says which keys it ignored.
"""

from __future__ import annotations

import re
import time

import streamlit as st

from hbmsim import HbmsimError
from hbmsim.problem.models import MODELS

from .choices import refused, splits_limit
from .fields import (
    CUSTOM,
    FIELDS,
    SECTIONS,
    STREAMLIT_KEYS,
    Field,
    Settings,
    out_of_range,
    parse,
    short_label,
    url_fields,
)

KEYS_DOC = "docs/app.md, 'URL keys'"  # where the URL's keys are listed


def _load_query_params() -> list[str]:
    """Once per session: URL parameters become the widgets' starting values. A bad value is
    named in one line (cut to 40 characters) and the widget keeps its default; keys the app
    does not know are named together in one line. Aliases (`seq`, `kv-heads`, ...) are read
    first, so a field's own key wins over an alias."""
    problems, ignored, given = [], [], set()
    keys = sorted(st.query_params, key=lambda k: k in FIELDS or k == "pass")
    for key in keys:
        text = st.query_params[key]
        names = url_fields(key)
        if not names:
            if key not in STREAMLIT_KEYS:
                ignored.append(key)
            continue
        for name in names:
            try:
                st.session_state[f"w_{name}"] = parse(name, text)
                given.add(name)
            except ValueError as exc:
                shown = text if len(text) <= 40 else text[:40] + "..."
                problems.append(f"URL parameter {key}={shown!r} ignored: {exc}")
                break
    model = MODELS.get(st.session_state.get("w_model"))
    if model is not None:  # the model sets its shape; a URL value that disagrees is named
        for name, value in model.shape().items():
            shown = st.session_state.get(f"w_{name}")
            if name in given and shown != value:
                problems.append(
                    f"URL parameter {name}={shown} ignored: model {model.name} sets {value}"
                )
            st.session_state[f"w_{name}"] = value
    if ignored:
        problems.append(
            f"URL keys ignored (not settings of this app): {', '.join(ignored)}; "
            f"the keys are in {KEYS_DOC}"
        )
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
VALID_KEY = "_valid"  # each field's last value that passed its range, by name
LIMITS_KEY = "_limits"  # this run's upper limits that depend on other fields (splits)
INPUT_KEY = "_input_problems"  # field -> the line saying a typed value was put back


def _changed(name: str) -> None:
    """Every widget's callback: the previous change's message goes; a number outside its
    field's range is put back to the last allowed value, with one line naming the field and
    the range; then the field's own callback."""
    problems = st.session_state.setdefault(INPUT_KEY, {})
    problems.clear()
    f, key = FIELDS[name], f"w_{name}"
    if f.kind in (int, float) and not f.choices:
        value = st.session_state.get(key)
        hi = st.session_state.get(LIMITS_KEY, {}).get(name)
        why = (
            f"{short_label(name)} needs a number"
            if value is None
            else out_of_range(name, value, hi)
        )
        if why:
            kept = st.session_state.get(VALID_KEY, {}).get(name, f.default)
            st.session_state[key] = kept
            got = (
                ""
                if value is None
                else f" (got {value:,})"
                if f.kind is int
                else f" (got {value:g})"
            )
            problems[name] = f"{why}{got}; kept {kept}"
    if name in _CALLBACKS:
        _CALLBACKS[name]()


def current() -> Settings:
    """The settings the widgets hold before they are drawn (callbacks have run by then)."""
    return Settings(
        **{name: st.session_state.get(f"w_{name}", f.default) for name, f in FIELDS.items()}
    )


def sidebar_ui() -> Settings:
    """Draws the sidebar; returns the settings and mirrors them into the URL."""
    st.session_state[SHOWN_KEY] = set()  # a new run: no error shown yet
    if "url_loaded" not in st.session_state:
        st.session_state["url_problems"] = _load_query_params()
        st.session_state["url_loaded"] = True
    for problem in st.session_state.get("url_problems", []):
        st.sidebar.warning(problem)
    offered = _offered(current())
    values = {}
    for section, names in SECTIONS.items():
        st.sidebar.subheader(section)
        for name in names:
            values[name] = _widget(name, FIELDS[name], offered.get(name))
            said = st.session_state.get(INPUT_KEY, {}).get(name)
            if said:
                st.sidebar.error(said)
    s = Settings(**values)
    st.session_state[VALID_KEY] = values
    st.query_params.from_dict(s.to_query())
    return s


def _offered(s: Settings) -> dict[str, dict]:
    """Per field whose choices depend on the others: the options, whether the control is
    disabled, its help and a caption naming what is not offered. A value that is not offered
    any more stays chosen (the pages say what to change); a pass the algorithm cannot run is
    moved to one it can, said in the sidebar."""
    algos, passes = refused(s)
    out: dict[str, dict] = {}
    left = [a for a in FIELDS["algo"].choices if a not in algos or a == s.algo]
    why = "; ".join(f"{a}: {tidy(a, user_message(w))}" for a, w in algos.items() if a != s.algo)
    out["algo"] = {
        "options": left,
        "help": FIELDS["algo"].help + (f". Not offered for these settings: {why}" if why else ""),
        "caption": (
            f"Not offered for these settings: {', '.join(a for a in algos if a != s.algo)} "
            "(the ? says why)"
            if why
            else ""
        ),
    }
    runs = [p for p in FIELDS["pass_"].choices if p not in passes]
    if runs and s.pass_ not in runs:
        st.session_state["w_pass_"] = runs[0]
        st.session_state.setdefault(INPUT_KEY, {})["pass_"] = (
            f"pass {s.pass_} was set to {runs[0]}: {s.algo} runs {', '.join(runs)} only"
        )
    if runs and len(runs) < len(FIELDS["pass_"].choices):
        reason = tidy(s.algo, user_message(next(iter(passes.values()))))
        out["pass_"] = {
            "options": runs,
            "disabled": len(runs) == 1,
            "help": f"{s.algo} runs {', '.join(runs)} only: {reason}. Choose another "
            "algorithm below for the other passes.",
        }
    if s.window_note():
        out["model"] = {"caption": s.window_note()}
    limit = splits_limit(s)
    st.session_state[LIMITS_KEY] = {"splits": limit[0]} if limit else {}
    out["splits"] = {
        "disabled": s.algo != "split-kv",
        "help": (
            f"chunks of the KV cache, from 0 (split-kv's default) to {limit[0]:,}: one per "
            f"K/V block of bk={limit[1]} at {s.seq_k:,} tokens"
            if limit
            else "chunks of the KV cache"
        )
        + ("" if s.algo == "split-kv" else "; split-kv only: choose it above to set them"),
    }
    return out


def _widget(name: str, f: Field, offer: dict | None):
    key = f"w_{name}"
    if key not in st.session_state:
        st.session_state[key] = f.default
    offer = offer or {}
    common = dict(
        key=key,
        help=offer.get("help") or f.help or None,
        disabled=offer.get("disabled", False),
        on_change=_changed,
        args=(name,),
    )
    if f.choices:
        chosen = st.sidebar.selectbox(f.label, offer.get("options", f.choices), **common)
        if offer.get("caption"):
            st.sidebar.caption(offer["caption"])
        return chosen
    if f.kind is bool:
        return st.sidebar.checkbox(f.label, **common)
    if f.kind is float:
        return float(st.sidebar.number_input(f.label, step=0.05, format="%g", **common))
    if name == "seq_q" and bool(st.session_state.get("w_decode")):  # decode: seq_q = 1
        common["disabled"] = True
    return int(st.sidebar.number_input(f.label, step=1, **common))


def settings() -> Settings:
    return st.session_state["settings"]


# hbmsim's errors name a field as the API and the CLI spell it; the page names it by its
# sidebar label (the part before any parenthesis), so "kv_heads: must divide heads (8); got 3"
# reads "kv heads: must divide heads (8); got 3"
_FIELD_WORDS = re.compile(r"\b(" + "|".join(n for n in FIELDS if "_" in n) + r")\b")


def user_message(text: str) -> str:
    """An error's text with every field named by its sidebar label."""
    return _FIELD_WORDS.sub(lambda m: short_label(m.group(1)), text)


def tidy(who: str, text: str) -> str:
    """`text` without the repeats of `who` an error gathers on its way up: hbmsim's refusal
    "dtype: flash-attn-2: FlashAttention ..." shown as flash-attn-2's reads
    "flash-attn-2: dtype: FlashAttention ...", not "flash-attn-2: dtype: flash-attn-2: ..."."""
    for name in filter(None, who.split(" and ")):
        text = re.sub(rf"(^|: ){re.escape(name)}(@[\w.-]+)?: ", r"\1", text)
    return text


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
        st.error(f"{named}: {tidy(named, text)}" if named else text)
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
