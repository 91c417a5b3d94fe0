"""Pure: the size of a drain's next claim."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class BatchSizer:
    """How many rows a drain's next claim asks for: from ``first``, doubling while claims come
    back full (a backlog: fewer, larger statements and commits per event), up to ``most``; a
    short claim starts again from ``first``, so a trickle is claimed in small batches."""

    first: int
    most: int
    #: The next claim's size.
    size: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.size = self.first

    def claimed(self, asked: int, got: int) -> None:
        """A claim that asked for ``asked`` rows returned ``got``."""
        self.size = min(self.most, asked * 2) if got >= asked else self.first
