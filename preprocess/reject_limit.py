"""How many rejects a conversion may have before its exit status says it failed.

A run that converted nothing always fails; `--max-rejects` (a count, or a fraction of the
inputs) makes one with too many rejects fail too. Either way the run first writes what it
could, and leaves OUT as a conversion in progress rather than a dataset: see
OutputDirectory.finish.
"""

from __future__ import annotations

from dataclasses import dataclass

from datapipe.errors import ArgumentError


@dataclass(frozen=True)
class RejectLimit:
    """At most `count` rejects, or at most `fraction` (in (0, 1)) of the inputs."""

    count: int | None = None
    fraction: float | None = None

    def __post_init__(self) -> None:
        if (self.count is None) == (self.fraction is None):
            raise ArgumentError("--max-rejects: give a count or a fraction, not both")
        if self.count is not None and (isinstance(self.count, bool) or
                                       not isinstance(self.count, int) or self.count < 0):
            raise ArgumentError(f"--max-rejects: a count must be an integer >= 0, got "
                                f"{self.count!r}")
        if self.fraction is not None and not (isinstance(self.fraction, float) and
                                              0 < self.fraction < 1):
            raise ArgumentError(f"--max-rejects: a fraction must be between 0 and 1, "
                                f"exclusive, got {self.fraction!r}")

    @classmethod
    def parse(cls, text: str) -> RejectLimit:
        """'25' (rejects) or '0.01' (of the inputs)."""
        try:
            return cls(count=int(text))
        except ValueError:
            pass
        try:
            fraction = float(text)
        except ValueError:
            raise ArgumentError(f"--max-rejects: expected a count (e.g. 25) or a fraction of "
                                f"the inputs (e.g. 0.01), got {text!r}") from None
        return cls(fraction=fraction)

    def exceeded(self, rejected: int, inputs: int) -> bool:
        if self.count is not None:
            return rejected > self.count
        return inputs > 0 and rejected / inputs > self.fraction  # as the user reckons it

    def __str__(self) -> str:
        return str(self.count if self.count is not None else self.fraction)


def reject_share(rejected: int, inputs: int) -> str:
    """'0.1 %' of the inputs; never '0.0 %' for some, nor '100.0 %' for not all."""
    if not inputs or not rejected:
        return "0 %"
    percent = 100 * rejected / inputs
    if percent < 0.05:
        return "< 0.1 %"
    return f"{percent:.1f} %" if percent < 99.95 or rejected == inputs else "> 99.9 %"
