"""The `kvplan` entry point: one line on error, never a traceback (unless KVPLAN_DEBUG=1).

Exit codes (docs/cli.md): 0 ok, 1 does not fit / check failed, 2 bad input, 3 internal error,
74 the output could not be written, 130 interrupted, 141 stdout closed by its reader.
A plain `kvplan size` line runs without typer (`cli_fast`); everything else, help and any
line it does not take goes through the typer app (`cli_app`).
"""

import contextlib
import errno
import os
import sys

from kvplan.errors import EXIT_BAD_INPUT, KvplanError

EXIT_INTERNAL = 3
EXIT_OUTPUT = 74  # sysexits EX_IOERR: a full disk, a closed or failing stdout
EXIT_PIPE = 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away
_OUTPUT_ERRNOS = {getattr(errno, n) for n in ("ENOSPC", "EIO", "EBADF", "EDQUOT", "EFBIG")
                  if hasattr(errno, n)}


def _usable_streams() -> None:
    """A closed stdout or stderr (`>&-`) becomes /dev/null, and text a terminal's encoding
    cannot show is replaced, not an error (box characters under PYTHONIOENCODING=ascii)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or not _open(stream):
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - lives to exit
        elif hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


def _open(stream: object) -> bool:
    """Whether a standard stream's file descriptor is open (Python keeps the stream object
    when the shell closed the descriptor); True for streams without one."""
    try:
        os.fstat(stream.fileno())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # none (a test's capture: UnsupportedOperation)
        return True
    except OSError:
        return False
    return True


def _pipe_closed() -> int:
    """The reader of stdout went away (`| head -1`): stop quietly, as `cat` does."""
    with contextlib.suppress(OSError, ValueError):  # no descriptor behind it (a test's capture)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_PIPE


def _fail(line: str, code: int) -> int:
    with contextlib.suppress(OSError):  # a failing stderr must not change the exit code
        sys.stderr.write(f"kvplan: {line}\n")
        sys.stderr.flush()
    return code


def _short_equals(args: list[str]) -> list[str]:
    """`-O=3` as argparse reads it (`-O 3`; vLLM's flags), where click would take "=3" as the
    value of a one-letter option; up to a `--`."""
    out: list[str] = []
    for i, a in enumerate(args):
        if a == "--":
            return out + args[i:]
        if len(a) > 3 and a[0] == "-" and a[1].isalpha() and a[2] == "=":
            out += [a[:2], a[3:]]
        else:
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run one command line; return its exit code."""
    debug = os.environ.get("KVPLAN_DEBUG") == "1"
    args = _short_equals(sys.argv[1:] if argv is None else list(argv))
    _usable_streams()
    try:
        from kvplan.cli_fast import size_kwargs

        kwargs = size_kwargs(args)
        if kwargs is not None:
            from kvplan import cli_size

            code = cli_size.run(**kwargs)
        else:
            from kvplan.cli_app import invoke

            code = invoke(args)
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        return _pipe_closed()
    except KvplanError as e:
        if debug:
            raise
        return _fail(f"error: {e.line()}", e.exit_code)
    except SystemExit as e:
        if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):  # click's EPIPE exit
            return _pipe_closed()
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt:
        return 130
    except (OverflowError, RecursionError, MemoryError) as e:
        if debug:
            raise
        return _fail(f"error: a value given is too large to compute with ({type(e).__name__}"
                     f"{': ' + str(e) if str(e) else ''})", EXIT_BAD_INPUT)
    except OSError as e:
        if debug:
            raise
        if e.filename is not None:  # a path given (unreadable, too long a name, ...)
            return _fail(f"error: cannot access {e.filename}: {e.strerror or e}",
                         EXIT_BAD_INPUT)
        if e.errno in _OUTPUT_ERRNOS:
            return _fail(f"error: cannot write the output: {e.strerror or e}", EXIT_OUTPUT)
        return _fail(f"internal error: {type(e).__name__}: {e} (set KVPLAN_DEBUG=1 for a "
                     "traceback and report it)", EXIT_INTERNAL)
    except Exception as e:  # noqa: BLE001 - last line of defence: no tracebacks for users
        if debug:
            raise
        return _fail(f"internal error: {type(e).__name__}: {e} (set KVPLAN_DEBUG=1 for a "
                     "traceback and report it)", EXIT_INTERNAL)


def run() -> None:
    sys.exit(main())
