"""Human-readable numbers for the CLI table and the app: bytes, counts, seconds, rates."""

from __future__ import annotations


def bytes_(n: float) -> str:
    """Decimal units (GB = 1e9), as bandwidths are quoted."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def count(n: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{int(n)}"


def seconds(t: float) -> str:
    if t == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(t) >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t:.3g} s"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain aligned text table: first column left-aligned, the rest right-aligned."""
    cells = [headers] + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for k, r in enumerate(cells):
        parts = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def tiles(t: dict) -> str:
    """{'bq': 128, 'bk': 64} -> 'bq 128, bk 64' (no Python dict in a caption)."""
    return ", ".join(f"{k} {v:,}" for k, v in t.items() if v is not None)


def rows(n: int, what: str) -> str:
    """rows(1, 'query') -> '1 query row'; rows(128, 'key') -> '128 key rows'."""
    return f"{n:,} {what} row{'' if n == 1 else 's'}"
