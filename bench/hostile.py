"""The hostile audit's commands (issue 51), each run as a real process: wall time and peak
memory of each, and the worst of each, against the bound every command must keep (10 s and
1 GB to refuse or answer, grids at the documented maximum of 1,000,000 points included).

    python bench/hostile.py [WORD ...]    (only the cases whose name holds a WORD)

Each case is `hbmsim ...` started fresh (imports included), timed from its start to its exit
(or, for a run of a million points, to its first row in the journal, then to its exit after
Ctrl-C). Memory is the peak resident set of the command's process, and of its whole process
tree (an explore run's Dask workers and fork server), sampled every 20 ms. Cases that need a
peer (a silent or garbage-speaking "scheduler") start one here. What each case must print is
checked too: a case that answers wrongly is marked, not just timed.

The audit's huge problems (items 8 and 9: the engine's work estimate and memory) are simulated
whole: each answers with a time or with the engine's one-line estimate of why not.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbmsim.fmt import table  # noqa: E402

MAX_S = 10.0
MAX_BYTES = 1 << 30
OVERFLOW = "[axes.hardware]\nhbm_bytes_per_s = {from = 1e12, to = 2e12, step = 1e-300}\n"
SMALL = ["--seq", "64", "--heads", "2", "--head-dim", "16"]
HUGE = [  # the audit's items 8 and 9: a time, or the engine's estimate in one line
    ("8 standard causal 1M tokens x 64 heads", "--algo standard --causal --seq 1000000 --heads 64"),
    (
        "8 torch-eager causal 1M tokens x 64 heads",
        "--impl torch-eager --causal --seq 1000000 --heads 64",
    ),
    ("8 standard causal 1M tokens x batch 64", "--algo standard --causal --seq 1000000 --batch 64"),
    (
        "9 fa2 decode, 16M-token cache, 64 GQA heads",
        "--algo fa2 --seq-q 1 --seq-k 16000000 --heads 64 --kv-heads 8",
    ),
    (
        "9 flash-attn-3 1M tokens x 64 x 64",
        "--impl flash-attn-3 --seq 1000000 --batch 64 --heads 64",
    ),
]
HUGE = [(name, args.split()) for name, args in HUGE]
SPEC = (
    "[axes]\nmodel = 'gpt2-medium'\ncontext = [64, 96, 128, 160]\nprogram = ['fa2', 'standard']\n"
)
MILLION = """
[axes]
model = ["llama-3-8b", "mistral-7b", "gpt2-medium", "llama-2-7b"]
batch = [1, 2, 4, 8]
context = {from = 1024, to = 16384, factor = 2}
program = ["fa2", "flash-attn-2"]
bq = [16, 32, 64, 128, 256]
bk = [16, 32, 64, 128, 256]
[axes.hardware]
sram_bytes_per_sm = [65536, 131072, 233472, 100000, 50000]
hbm_bytes_per_s = {from = 1.0e12, to = 5.0e12, step = 1.0e12}
l2_bytes = [1000000, 2000000, 3000000, 4000000, 5000000, 6000000, 7000000, 8000000, 9000000, 10000000]
"""  # noqa: E501 - a spec's line as a user writes it
HUNDRED_K = MILLION.replace(
    "[1000000, 2000000, 3000000, 4000000, 5000000, 6000000, 7000000, 8000000, 9000000, 10000000]",
    "[1000000]",
)


class Measured:
    """One command: its exit code, stderr, seconds and peak memory (its own, its tree's)."""

    def __init__(self, args, stdout=subprocess.DEVNULL, env=None):
        self.args = [str(a) for a in args]
        environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hbmsim.cli", *self.args],
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=environment,
            cwd=ROOT,
            start_new_session=True,
        )
        self.own = self.tree = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        self.err = ""
        self.code = None
        self.seconds = 0.0

    def _sample(self):
        try:
            me = psutil.Process(self.proc.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            try:
                own = me.memory_info().rss
                kids = sum(c.memory_info().rss for c in me.children(recursive=True))
                self.own, self.tree = max(self.own, own), max(self.tree, own + kids)
            except psutil.Error:
                pass
            time.sleep(0.02)

    def wait(self, timeout=120):
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            _, err = self.proc.communicate()
        self.seconds = time.monotonic() - self.t0
        self._stop.set()
        self._sampler.join()
        self.err, self.code = err.decode(errors="replace"), self.proc.returncode
        return self


def one_line(m: Measured, *words) -> bool:
    return m.code == 2 and m.err.count("\n") == 1 and all(w in m.err for w in words)


def cases(tmp: Path, peers: dict) -> list[tuple[str, object]]:
    """(name, run) for each audit case; run() returns (Measured, ok) with Measured.seconds the
    time the case is about."""
    spec = tmp / "s.toml"
    spec.write_text(SPEC)
    big = tmp / "million.toml"
    big.write_text(MILLION)
    hundred = tmp / "hundred-k.toml"
    hundred.write_text(HUNDRED_K)
    gpu = tmp / "g.json"
    gpu.write_text('{"base": "h100-sxm"}')
    out = tmp / "o.parquet"

    def plain(args, *words, code=2, **kw):
        def run():
            m = Measured(args, **kw).wait()
            ok = one_line(m, *words) if code == 2 else m.code == code and "Traceback" not in m.err
            return m, ok

        return run

    def profile(text):
        path = tmp / f"p{abs(hash(text))}.json"
        path.write_text(text)
        return path

    found = [
        ("1 explore after SIGKILL, --dry-run", lambda: killed_then(tmp, spec, ["--dry-run"])),
        ("1 explore after SIGKILL, the run", lambda: killed_then(tmp, spec, ["--workers", "1"])),
        ("2 a second run on one output", lambda: second_run(tmp, spec)),
        ("3 Ctrl-C during cluster start-up", lambda: interrupted(tmp, spec, 1.0, signal.SIGINT)),
        ("3 SIGTERM during cluster start-up", lambda: interrupted(tmp, spec, 1.2, signal.SIGTERM)),
    ]
    for address in (
        "not a url",
        "",
        "tcp://127.0.0.1",
        "http://127.0.0.1:80",
        "ucx://127.0.0.1:8786",
        "tls://127.0.0.1:8786",
    ):
        found.append(
            (
                f"4 --scheduler {address!r}",
                plain(["explore", spec, "-o", out, "--scheduler", address], "scheduler:"),
            )
        )
    for kind, address in peers.items():
        found.append(
            (
                f"4 a {kind} peer",
                plain(["explore", spec, "-o", out, "--scheduler", address], "scheduler:"),
            )
        )
    fifo_dir = tmp / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / ".o.parquet.journal")
    found += [
        (
            "5 the journal path a FIFO",
            plain(["explore", spec, "-o", fifo_dir / "o.parquet"], "not a plain file"),
        ),
        (
            "6 a range of step 1e-300",
            plain(
                [
                    "explore",
                    write(
                        tmp,
                        "over.toml",
                        SPEC + OVERFLOW,
                    ),
                    "-o",
                    out,
                ],
                "expands to more than",
            ),
        ),
        (
            "7 --dry-run of 1,000,000 points",
            plain(["explore", big, "-o", tmp / "big.parquet", "--dry-run"], code=0),
        ),
        ("7 1,000,000 points: first row", lambda: first_row(tmp, big)),
        ("7 100,000 points: first row", lambda: first_row(tmp, hundred)),
    ]
    for name, args in HUGE:
        found.append((name, plain(["simulate", *args, "--json"], code=0)))
    found += [
        ("10 simulate --json | true", lambda: closed_pipe(["simulate", *SMALL, "--json"])),
        (
            "10 sweep | true",
            lambda: closed_pipe(
                ["sweep", "--seq", ",".join(str(64 * i) for i in range(1, 40)), "--no-engine"]
            ),
        ),
        (
            "10 trace, stdout closed",
            lambda: closed_pipe(["trace", *SMALL, "-o", tmp / "t.hbmtrace"]),
        ),
        ("10 simulate > /dev/full", lambda: full_disk(["simulate", *SMALL])),
        (
            "10 PYTHONIOENCODING=ascii",
            plain(["simulate", *SMALL], code=0, env={"PYTHONIOENCODING": "ascii"}),
        ),
        (
            '11 a profile named "\\ud800"',
            plain(
                ["simulate", *SMALL, "--gpu", profile('{"base": "h100-sxm", "name": "\\ud800"}')],
                "lone surrogate",
            ),
        ),
        (
            "11 a profile's key twice",
            plain(
                [
                    "simulate",
                    *SMALL,
                    "--gpu",
                    profile('{"base": "h100-sxm", "l2_bytes": 1, "l2_bytes": 2}'),
                ],
                "twice",
            ),
        ),
        (
            "11 max_threads_per_sm 1",
            plain(
                [
                    "simulate",
                    *SMALL,
                    "--gpu",
                    profile('{"base": "h100-sxm", "max_threads_per_sm": 1}'),
                ],
                "max_threads_per_sm",
            ),
        ),
        (
            "11 registers_per_sm 1",
            plain(
                [
                    "simulate",
                    *SMALL,
                    "--gpu",
                    profile('{"base": "h100-sxm", "registers_per_sm": 1}'),
                ],
                "registers_per_sm",
            ),
        ),
    ]
    published = tiny_published(tmp)
    for extra in ([], ["--json"], ["--report", tmp / "r.json"]):
        found.append(
            (
                f"12 published 1e-320 {extra[0] if extra else 'text'}",
                plain(["validate", "--published", published, *extra], "measured_time_s"),
            )
        )
    trace = tmp / "t0.hbmtrace"
    subprocess.run(
        [sys.executable, "-m", "hbmsim.cli", "trace", "--seq", "128", "--heads", "2", "-o", trace],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
    )
    for field, value in (
        ("batch", 2),
        ("seq_q", 64),
        ("algo", "fa1"),
        ("dtype", "fp8"),
        ("sram_bytes", 0),
    ):
        found.append(
            (
                f"13 replay, header {field} edited",
                plain(["replay", edited(trace, tmp, field, value)], "does not match"),
            )
        )
    found += [
        (
            "14 flash-attn-1 --dtype fp8",
            plain(
                ["simulate", *SMALL, "--impl", "flash-attn-1", "--dtype", "fp8"], "fp16, and bf16"
            ),
        ),
        (
            "14 torch-eager fp32 on rtx4090",
            plain(
                [
                    "simulate",
                    "--seq",
                    "1024",
                    "--impl",
                    "torch-eager",
                    "--dtype",
                    "fp32",
                    "--gpu",
                    "rtx4090",
                ],
                code=0,
            ),
        ),
        (
            "14 torch-eager fp32 on a10",
            plain(
                [
                    "simulate",
                    "--seq",
                    "1024",
                    "--impl",
                    "torch-eager",
                    "--dtype",
                    "fp32",
                    "--gpu",
                    "a10",
                ],
                code=0,
            ),
        ),
    ]
    for flag, value in (("--bq", "0"), ("--bq", "-1"), ("--bq", str(2**63)), ("--splits", "0")):
        algo = ["--algo", "split-kv"] if flag == "--splits" else []
        found.append(
            (
                f"15 sweep {flag} {value[:8]}",
                plain(["sweep", *SMALL, *algo, flag, value, "--no-engine"], flag.strip("-") + ":"),
            )
        )
    found += [
        (
            "16 sweep --gpu g.json -o g.json",
            plain(["sweep", *SMALL, "--gpu", gpu, "-o", gpu], "input of this command"),
        ),
        (
            "16 simulate --timeline g.json",
            plain(["simulate", *SMALL, "--gpu", gpu, "--timeline", gpu], "input of this command"),
        ),
        (
            "16 --published p --report p",
            plain(
                ["validate", "--published", published, "--report", published],
                "input of this command",
            ),
        ),
        (
            "17 a 100k-character --model",
            plain(["simulate", *SMALL, "--model", "x" * 100_000], "model"),
        ),
        (
            "17 sram_bytes_per_sm = [1]",
            plain(
                [
                    "explore",
                    write(tmp, "sram.toml", SPEC + "[axes.hardware]\nsram_bytes_per_sm = [1]\n"),
                    "-o",
                    out,
                    "--dry-run",
                ],
                "sram_bytes_per_sm[0]",
            ),
        ),
        (
            "17 --dry-run --workers 0",
            plain(["explore", spec, "-o", out, "--dry-run", "--workers", "0"], "workers"),
        ),
        (
            "17 --dry-run --workers -5",
            plain(["explore", spec, "-o", out, "--dry-run", "--workers", "-5"], "workers"),
        ),
        ("17 --seq 1_000", plain(["simulate", "--seq", "1_000"], "plain ASCII digits")),
        ("17 --seq ５１２", plain(["simulate", "--seq", "５１２"], "plain ASCII digits")),
    ]
    return found


def write(folder: Path, name: str, text: str) -> Path:
    (folder / name).write_text(text)
    return folder / name


def killed_then(tmp: Path, spec: Path, rerun: list[str]):
    """A run SIGKILLed mid-run (its journal has rows), then the same command (or --dry-run)."""
    out = tmp / f"k{len(rerun)}.parquet"
    first = Measured(["explore", spec, "-o", out, "--workers", "1"])
    journal = out.with_name(f".{out.name}.journal")
    deadline = time.monotonic() + 60
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 3):
        if time.monotonic() > deadline or first.proc.poll() is not None:
            break
        time.sleep(0.01)
    os.killpg(first.proc.pid, signal.SIGKILL)
    first.wait()
    m = Measured(["explore", spec, "-o", out, *rerun]).wait()
    return m, m.code == 0 and "Traceback" not in m.err


def second_run(tmp: Path, spec: Path):
    out = tmp / "shared.parquet"
    first = Measured(["explore", spec, "-o", out, "--workers", "1"])
    lock = out.with_name(f".{out.name}.lock")
    while not (lock.exists() and lock.read_text()) and first.proc.poll() is None:
        time.sleep(0.01)
    m = Measured(["explore", spec, "-o", out]).wait()
    first.wait()
    return m, one_line(m, f"process {first.proc.pid} ") and first.code == 0


def interrupted(tmp: Path, spec: Path, at: float, sig: int):
    """The signal `at` seconds after start (the cluster starting); timed from the signal."""
    out = tmp / f"i{sig}.parquet"
    m = Measured(["explore", spec, "-o", out, "--workers", "2"])
    time.sleep(at)
    sent = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(m.proc.pid, sig)
    else:
        os.kill(m.proc.pid, sig)
    m.wait()
    m.seconds = time.monotonic() - sent
    expected = {signal.SIGINT: 130, signal.SIGTERM: 143}[sig]
    return m, m.code == expected and "Traceback" not in m.err


def first_row(tmp: Path, spec: Path):
    """Start to the first row in the journal; then Ctrl-C, which must end it within MAX_S."""
    out = tmp / f"{spec.stem}.parquet"
    m = Measured(["explore", spec, "-o", out, "--workers", "2"])
    journal = out.with_name(f".{out.name}.journal")
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 2):
        if m.proc.poll() is not None or time.monotonic() - m.t0 > 60:
            break
        time.sleep(0.02)
    first = time.monotonic() - m.t0
    sent = time.monotonic()
    os.killpg(m.proc.pid, signal.SIGINT)
    m.wait()
    stop = time.monotonic() - sent
    m.seconds = max(first, stop)
    return m, m.code == 130 and "Traceback" not in m.err


def closed_pipe(args):
    read, write_end = os.pipe()
    os.close(read)
    m = Measured(args, stdout=write_end)
    os.close(write_end)
    m.wait()
    return m, m.code in (0, 141) and m.err == ""


def full_disk(args):
    with open("/dev/full", "w") as full:
        m = Measured(args, stdout=full).wait()
    return m, one_line(m, "No space left on device")


def tiny_published(tmp: Path) -> Path:
    data = json.loads((ROOT / "hbmsim" / "data" / "published_attention.json").read_text())
    data["points"] = data["points"][:2]
    data["points"][1]["measured_time_s"] = 1e-320
    return write(tmp, "published.json", json.dumps(data))


def edited(trace: Path, tmp: Path, field: str, value) -> Path:
    data = trace.read_bytes()
    magic, version, n = struct.unpack_from("<8sII", data)
    header = json.loads(data[16 : 16 + n])
    if field == "algo":
        header["algo"] = value
    elif field in header["kernels"][0]:
        header["kernels"][0][field] = value
    else:
        header["problem"][field] = value
    head = json.dumps(header, separators=(",", ":")).encode()
    body = struct.pack("<8sII", magic, version, len(head)) + head + data[16 + n : -4]
    path = tmp / f"edited-{field}.hbmtrace"
    path.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    return path


@contextlib.contextmanager
def peers():
    """A silent and a garbage-speaking TCP peer on free ports, and a closed one."""
    servers, held = [], []

    def serve(server, kind):
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if kind == "garbage":
                with contextlib.suppress(OSError):
                    conn.sendall(bytes(range(256)) * 4)

    addresses = {}
    for kind in ("silent", "garbage"):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        servers.append(server)
        threading.Thread(target=serve, args=(server, kind), daemon=True).start()
        addresses[kind] = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        addresses["closed-port"] = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    try:
        yield addresses
    finally:
        for s in servers + held:
            s.close()


def main() -> int:
    # A shell starts a background job with Ctrl-C ignored, and an exec'd child keeps an ignored
    # signal: the Ctrl-C cases need it to be the default a user's terminal gives.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    only = sys.argv[1:]  # words: run only the cases whose name holds one of them
    rows, worst_s, worst_b = [], (0.0, ""), (0, "")
    with tempfile.TemporaryDirectory(prefix="hbmsim-hostile-") as d, peers() as addresses:
        for name, run in cases(Path(d), addresses):
            if only and not any(word in name for word in only):
                continue
            m, ok = run()
            good = ok and m.seconds <= MAX_S and m.tree <= MAX_BYTES
            rows.append(
                [
                    name[:40],
                    f"{m.seconds:.2f}",
                    f"{m.own / 1e6:.0f}",
                    f"{m.tree / 1e6:.0f}",
                    str(m.code),
                    "ok" if good else ("WRONG" if not ok else "OVER"),
                ]
            )
            worst_s = max(worst_s, (m.seconds, name))
            worst_b = max(worst_b, (m.tree, name))
            print(f"  {name}: {m.seconds:.2f} s", file=sys.stderr, flush=True)
    print(table(["case", "seconds", "own MB", "tree MB", "exit", ""], rows))
    print()
    print(f"worst wall time:   {worst_s[0]:.2f} s  ({worst_s[1]}); bound {MAX_S:g} s")
    print(
        f"worst peak memory: {worst_b[0] / 1e6:.0f} MB ({worst_b[1]}); "
        f"bound {MAX_BYTES / 1e6:.0f} MB"
    )
    failed = sum(r[-1] != "ok" for r in rows)
    print(f"{len(rows)} cases, {failed} not ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
