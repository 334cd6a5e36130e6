"""The one parser of numbers a user types: command-line flags, explore specs and the app's URL.

Why one: Python's `int()` and `float()` take far more than a person means by a number
(`1_000`, full-width `５`, Arabic-Indic `٣٢`, `nan`, `inf`, ` 12 `), TOML takes `0x10` and
`1_000`, and a URL value is whatever was pasted. Each entry point once accepted its own set,
so one value could run from the command line and be refused by the app. Here a number is
written one way everywhere: plain ASCII digits, an optional sign, decimal point and exponent
(`4096`, `0.5`, `1e12`, `2.5E-3`); anything else is refused with the same words, `SPELLING`.

An integer field takes any of those spellings whose value is whole (`4e3` is 4000, `1.5` is
refused): the value, not the spelling, decides. Nothing is rounded: a value a float cannot
hold (`1e999`, or `1e-400`, which would become 0) is refused, not changed.
"""

from __future__ import annotations

import bisect
import re
from decimal import Decimal

NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_NUMBER_CHARS = 40  # the longest exact integer a field takes has 20 digits
MAX_INT_DIGITS = 24  # past every integer range: such a value is refused by its range check
SPELLING = (
    "must be plain ASCII digits with an optional sign, decimal point and exponent (4096, 0.5, 1e12)"
)


class HugeInt(float):
    """A whole number of more than MAX_INT_DIGITS digits, kept unbuilt (CPython converts long
    digit strings in quadratic time): infinite as a number, so every range check refuses it
    and names the field, and it reads as "an integer of 5,000 digits" in that message."""

    def __new__(cls, digits: int, negative: bool = False):
        self = super().__new__(cls, -float("inf") if negative else float("inf"))
        self.digits = digits
        return self

    def __repr__(self) -> str:
        return f"an integer of {self.digits:,} digits"

    __str__ = __repr__


def shown(text: str) -> str:
    """A typed value as a message quotes it: cut to 40 characters, its length said."""
    if len(text) <= MAX_NUMBER_CHARS:
        return repr(text)
    return f"{text[:20]!r}... ({len(text):,} characters)"


def spelling_error(text: str) -> str:
    """The one message for a value that is not spelled as a number."""
    return f"{SPELLING} (got {shown(text)})"


def parse_number(text: str, integer: bool = False) -> int | float:
    """`text` as a number, or ValueError with the message (without a field name: each caller
    names its own field). `integer`: the value must be whole, and comes back as an int."""
    if not isinstance(text, str) or not NUMBER.fullmatch(text):
        raise ValueError(spelling_error(str(text)))
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(
            f"is too long: a number has at most {MAX_NUMBER_CHARS} characters (got {shown(text)})"
        )
    exact = Decimal(text)
    if integer:
        if exact != exact.to_integral_value():
            raise ValueError(f"must be a whole number (got {shown(text)})")
        if exact.adjusted() >= MAX_INT_DIGITS:
            return HugeInt(exact.adjusted() + 1, exact < 0)
        return int(exact)
    value = float(exact)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"is too large for a number (got {shown(text)})")
    if value == 0 and exact != 0:
        raise ValueError(f"is too small to hold: it would become 0 (got {shown(text)})")
    return value


def decimal_number(value: Decimal, integer: bool = False) -> int | float:
    """A number a spec file gave (TOML floats are read as Decimal, so no digit is lost before
    this check), as parse_number gives it for the same spelling: ValueError if refused."""
    if not value.is_finite():  # TOML's nan and inf: not digits
        raise ValueError(spelling_error(str(value).lower()))
    text = str(value)
    if len(text) > MAX_NUMBER_CHARS:  # a long TOML float: its digits are what was typed
        text = f"{value:.{MAX_NUMBER_CHARS - 10}e}"
    return parse_number(text, integer)


# -- numbers in TOML text ----------------------------------------------------------------------

# a bare token that starts like a number: a sign or a digit of any script (str patterns'
# \d is Unicode: full-width and Arabic-Indic digits too), then anything a TOML value or a
# typo may hold; not inside a name (`fp16`, `a.b1`)
_TOKEN = re.compile(r"(?<![\w.])[+-]?\d[\w.+\-:]*|(?<![\w.])[+-]?\.\d[\w.+\-:]*")
_MARK = re.compile(r"[{,\[=]")  # where a key ends (=) or a value list starts
_HEADER = re.compile(r"\s*\[\[?([^\]]*)\]\]?\s*$")
_SPECIAL = re.compile("[#\"']")


def toml_numbers(text: str) -> list[tuple[str, int, str]]:
    """Every bare token of TOML text that starts like a number, as (field, line, token): the
    field is the key path it is the value of (`axes.context.from`). Strings and comments are
    skipped, so a name in quotes (`"fp16"`, `"llama-3-8b"`) is never read as a number."""
    bare = _blank_strings(text)
    found, table, key = [], "", ""
    start = 0
    for lineno, line in enumerate(bare.split("\n"), start=1):
        raw = text[start : start + len(line)]
        start += len(line) + 1
        header = _HEADER.match(line)
        if header and "=" not in line:
            table, key = _unquote(raw[header.start(1) : header.end(1)]), ""
            continue
        keys = _keys(line, raw)
        if keys and not line[: keys[0][0]].strip().startswith(("{", ",", "[")):
            key = keys[0][1]  # the line's own key; later ones are an inline table's
        ends = [end for end, _ in keys]
        for m in _TOKEN.finditer(line):
            at = bisect.bisect_right(ends, m.start()) - 1  # the nearest key before the token
            path = [table, key] + ([keys[at][1]] if at >= 1 else [])
            found.append((".".join(p for p in path if p), lineno, m.group()))
    return found


def _keys(line: str, raw: str) -> list[tuple[int, str]]:
    """(where its value starts, key) for each `key =` of a line, in one pass: a key is what
    stands between the last `{`, `,` or `[` (or the line's start) and its `=`."""
    keys, last = [], -1
    for m in _MARK.finditer(line):
        if m.group() == "=":
            name = raw[last + 1 : m.start()].strip()
            if name:
                keys.append((m.end(), _unquote(name)))
        last = m.start()
    return keys


def _unquote(key: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in key.split("."))


def _blank_strings(text: str) -> str:
    """`text` with every comment blanked and the inside of every string replaced by \\x01
    (quotes and newlines kept, so lines and columns stay where they were and a quoted key
    still reads as a key)."""
    out, i, n = [], 0, len(text)
    while i < n:
        special = _SPECIAL.search(text, i)
        if special is None:
            out.append(text[i:])
            break
        out.append(text[i : special.start()])
        i = special.start()
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
        else:
            end = _string_end(text, i)
            q = 3 if text[i : i + 3] in ('"""', "'''") else 1
            inner = re.sub(r"[^\n]", "\x01", text[i + q : max(i + q, end - q)])
            out.append(text[i : i + q] + inner + text[i + q + len(inner) : end])
        i = end
    return "".join(out)


_STRINGS = {  # each TOML string form, to its closing quote (or, unclosed, the line's end)
    '"""': re.compile(r'"""(?:\\.|[^\\])*?(?:"""|$)', re.S),
    "'''": re.compile(r"'''.*?(?:'''|$)", re.S),
    '"': re.compile(r'"(?:\\.|[^"\\\n])*"?'),
    "'": re.compile(r"'[^'\n]*'?"),
}


def _string_end(text: str, i: int) -> int:
    """Where the string starting at `i` ends: past its closing quote, or for an unclosed one
    where its line (or the text) ends, for the TOML parser to say what is wrong."""
    quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else text[i]
    return _STRINGS[quote].match(text, i).end()
