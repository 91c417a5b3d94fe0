"""One check's verdict, as ``relay doctor`` reports it: ``pass``, ``warn`` or ``fail``, with a
detail and, unless it passed, the fix. The doctor's modules each return these."""

from __future__ import annotations

from dataclasses import asdict, dataclass

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)
