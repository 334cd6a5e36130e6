"""The `hbmsim` command: its argument parser (`parser`), the commands (`commands`) and the text
report (`report`).

Run as the program (`hbmsim ...`, `python -m hbmsim.cli ...`), this package answers Ctrl-C
and SIGTERM from the moment it loads: loading the commands takes half a second, and a signal
in that time ends the program with one line and the signal's exit status instead of a
traceback of the import it cut. `commands.main` then hands Ctrl-C back to Python (a
KeyboardInterrupt each command handles) once everything has loaded.
"""

import os
import signal
import sys

STARTING_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal


def _starting(signum, _frame) -> None:
    try:
        sys.stderr.write("\nhbmsim: interrupted while starting; nothing was run or written\n")
        sys.stderr.flush()
    finally:
        os._exit(STARTING_STATUS.get(signum, 130))


def _as_program() -> bool:
    """Whether this process is the `hbmsim` command (the console script, or `python -m
    hbmsim.cli`, whose argv[0] is "-m" while the package loads), not a program importing it."""
    first = sys.argv[0] if sys.argv else ""
    return first == "-m" or os.path.basename(first) == "hbmsim"


AS_PROGRAM = _as_program()  # decided while the package loads: argv[0] is "-m" only then

if AS_PROGRAM:
    # signals left ignored by whoever started the process (a background job) stay ignored
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _starting)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _starting)


def started() -> None:
    """The commands have loaded: Ctrl-C raises KeyboardInterrupt again, SIGTERM ends the
    process as it would have (each command that must write whole on SIGTERM says so)."""
    if signal.getsignal(signal.SIGINT) is _starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) is _starting:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def finished() -> None:
    """The command has done its work and said so: a Ctrl-C or SIGTERM while the interpreter
    exits (Dask's threads winding down) has nothing left to stop, and is ignored rather than
    ending the program by the signal after its work was reported done. Only as the program:
    a process that imports the commands keeps its own signals."""
    if AS_PROGRAM:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
