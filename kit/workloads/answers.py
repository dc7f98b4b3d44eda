"""Final answers of math responses: extracted by ordered patterns and compared as numbers.

Accepting only the requested `#### n` form is a known trap (seed 000 §IV-F): models often answer
correctly in another unambiguous form. The patterns are tried in order; the first that matches wins.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

NUMBER = r"-?\$?\s*\d[\d,]*(?:\.\d+)?"
PATTERNS = (
    ("hashes", re.compile(rf"####\s*({NUMBER})")),
    ("boxed", re.compile(rf"\\boxed\{{\s*({NUMBER})\s*\}}")),
    ("answer is", re.compile(rf"answer is[:\s]*\**\s*({NUMBER})", re.IGNORECASE)),
    ("bold at line end", re.compile(rf"\*\*\s*({NUMBER})\s*\*\*\s*\.?\s*$", re.MULTILINE)),
)


def to_number(text: str) -> Decimal | None:
    cleaned = text.replace("$", "").replace(",", "").replace(" ", "")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def extract(response: str) -> tuple[Decimal | None, str | None]:
    """(the final answer as a number, the pattern that found it), or (None, None)."""
    for name, pattern in PATTERNS:
        matches = pattern.findall(response)
        if matches:
            return to_number(matches[-1]), name
    return None, None


def is_correct(response: str, reference: str) -> bool:
    answer, _ = extract(response)
    expected = to_number(reference)
    return answer is not None and expected is not None and answer == expected
