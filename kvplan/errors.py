"""Error types and the exit codes they map to (documented in docs/cli.md)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAIL = 1  # the deployment does not fit / a check failed / an unhealthy finding
EXIT_BAD_INPUT = 2  # bad input of any kind: unknown model, malformed file, impossible flags


class KvplanError(Exception):
    """An error with a one-line, user-facing message and an exit code."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, hint: str | None = None, flag: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.flag = flag  # the EngineArgs field the engine rejects, where one is to blame

    def line(self) -> str:
        """The single line printed to stderr."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class BadInput(KvplanError):
    """Unknown model/GPU, malformed config, impossible flags (exit 2)."""


class NotPlanned(BadInput):
    """Bad input whatever the candidate deployment (exit 2): a search stops at it instead of
    rejecting the candidate."""


class RefusedEverywhere(BadInput):
    """Bad input on every GPU and TP a search could try (a KV dtype vLLM refuses for this
    model): the search rejects the candidate, and when every candidate is rejected so, the
    run is bad input (exit 2), not "does not fit"."""


class UnsupportedArchitecture(BadInput):
    """A config kvplan cannot classify without guessing (exit 2)."""


class DoesNotFit(KvplanError):
    """The engine would refuse to start with these settings (exit 1)."""

    exit_code = EXIT_FAIL


def yaml_problem(e: Exception) -> str:
    """A PyYAML error's problem in one line: a marked error's `problem`, else the first line
    of its text (a ReaderError's "unacceptable character #x0001: ..." spans two)."""
    return getattr(e, "problem", None) or str(e).splitlines()[0]
