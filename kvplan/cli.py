"""The `kvplan` entry point: one line on error, never a traceback (unless KVPLAN_DEBUG=1).

Exit codes (docs/cli.md): 0 ok, 1 does not fit / check failed, 2 bad input, 3 internal error.
A plain `kvplan size` line runs without typer (`cli_fast`); everything else, help and any
line it does not take goes through the typer app (`cli_app`).
"""

import os
import sys

from kvplan.errors import KvplanError

EXIT_INTERNAL = 3


def main(argv: list[str] | None = None) -> int:
    """Run one command line; return its exit code."""
    debug = os.environ.get("KVPLAN_DEBUG") == "1"
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        from kvplan.cli_fast import size_kwargs

        kwargs = size_kwargs(args)
        if kwargs is not None:
            from kvplan import cli_size

            return cli_size.run(**kwargs)
        from kvplan.cli_app import invoke

        return invoke(args)
    except KvplanError as e:
        if debug:
            raise
        sys.stderr.write(f"kvplan: error: {e.line()}\n")
        return e.exit_code
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - last line of defence: no tracebacks for users
        if debug:
            raise
        sys.stderr.write(f"kvplan: internal error: {type(e).__name__}: {e} "
                         "(set KVPLAN_DEBUG=1 for a traceback and report it)\n")
        return EXIT_INTERNAL


def run() -> None:
    sys.exit(main())
