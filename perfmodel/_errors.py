"""Error types. Every user-facing error names the field at fault and says how to fix it."""

from __future__ import annotations

__all__ = ["PerfmodelError", "PerfmodelWarning", "SpecError", "UnitError"]


class PerfmodelError(ValueError):
    """A user-facing error: ``field`` names the input at fault, ``fix`` says what to do.

    Subclasses ``ValueError`` so generic callers can catch it; the CLI prints
    ``str(error)`` on one line and exits with status 2.
    """

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        text = f"{field}: {problem}" if field else problem
        if fix:
            text += f" (fix: {fix})"
        super().__init__(text)


class UnitError(PerfmodelError):
    """A quantity string that cannot be read as the expected kind of unit."""


class SpecError(PerfmodelError):
    """A hardware spec that does not validate; ``errors`` lists every problem found."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source = source
        self.errors = list(errors)
        first = errors[0] if errors else "invalid spec"
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(source, first + more)


class PerfmodelWarning(UserWarning):
    """Input perfmodel accepts but doubts (a prompt past the model's context window, a peak
    it cannot cross-check): issued with :func:`warnings.warn`, so a caller can make it an
    error with ``warnings.simplefilter("error", PerfmodelWarning)`` (the CLI's ``--strict``).
    ``field``, ``problem`` and ``fix`` as in :class:`PerfmodelError`.
    """

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        text = f"{field}: {problem}" if field else problem
        if fix:
            text += f" ({fix})"
        super().__init__(text)
