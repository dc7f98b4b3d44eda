"""Answer extraction on real SmolLM2 outputs (recorded by tests/fixtures/gsm8k/record.py) and on the
other forms the ordered patterns accept."""

import json
from decimal import Decimal
from pathlib import Path

import pytest

from kit.workloads.answers import extract, is_correct

RECORDED = [json.loads(line) for line in
            (Path(__file__).parents[1] / "fixtures" / "gsm8k" / "smollm2_outputs.jsonl").read_text().splitlines()]
# What a person reading each recorded response takes as its final answer (None: it gives none).
READ_BY_HAND = {"gsm8k-0": "520", "gsm8k-1": "16", "gsm8k-2": "100", "gsm8k-3": "27", "gsm8k-4": "28",
                "gsm8k-5": None, "gsm8k-6": "20", "gsm8k-7": None, "gsm8k-8": "4", "gsm8k-9": None,
                "gsm8k-10": None, "gsm8k-11": "25"}


@pytest.mark.parametrize("row", RECORDED, ids=lambda row: row["id"])
def test_recorded_smollm2_answers(row):
    answer, _ = extract(row["text"])
    expected = READ_BY_HAND[row["id"]]
    assert answer == (Decimal(expected) if expected else None)
    assert is_correct(row["text"], row["reference"]) == (expected is not None and Decimal(expected) ==
                                                         Decimal(row["reference"].replace(",", "")))


@pytest.mark.parametrize("text, number, rule", [
    ("so she has 18 left.\n#### 18", "18", "hashes"),
    ("The total is \\boxed{1,250}.", "1250", "boxed"),
    ("Therefore the answer is: $72.50", "72.5", "answer is"),
    ("She keeps\n**36**\n", "36", "bold at line end"),
    ("#### 5\nThe answer is 6", "5", "hashes"),  # the requested form wins
])
def test_other_forms(text, number, rule):
    assert extract(text) == (Decimal(number), rule)


def test_numbers_compare_numerically_not_as_strings():
    assert is_correct("#### 1,200.00", "1200")
    assert not is_correct("#### 12", "120")
    assert not is_correct("no number here", "3")
