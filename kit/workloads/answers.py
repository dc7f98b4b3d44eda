"""Final answers of math responses: extracted by ordered patterns and compared as numbers.

Accepting only the requested `#### n` form is a known trap (seed 000 §IV-F): models often answer
correctly in another unambiguous form. The patterns are tried in order; the first that matches wins,
and within it the last occurrence. "The answer is 150% of $80,000 = $1,000" states 1,000: when an
"answer is" line carries an equation, the number after its last `=` is the answer.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

NUMBER = r"-?\$?\s*\d[\d,]*(?:\.\d+)?"
PATTERNS = (
    ("hashes", re.compile(rf"(?<!#)####(?!#)\s*({NUMBER})")),  # exactly four: "##### 27" is a heading
    ("boxed", re.compile(rf"\\boxed\{{\s*({NUMBER})\s*\}}")),
    ("answer is", re.compile(rf"answer is[:\s]*\**\s*({NUMBER}(?:[^\n=]*=\s*\**\s*{NUMBER})*)", re.IGNORECASE)),
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
            stated = matches[-1].rsplit("=", 1)[-1].strip().lstrip("*")  # "x = y": y is what is stated
            return to_number(stated), name
    return None, None


def is_correct(response: str, reference: str) -> bool:
    answer, _ = extract(response)
    expected = to_number(reference)
    return answer is not None and expected is not None and answer == expected
