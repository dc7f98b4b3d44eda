"""Answer extraction on real SmolLM2 outputs in each weight format of the CPU ladder (recorded by
tests/fixtures/gsm8k/record.py) and on the other forms the ordered patterns accept."""

import json
from decimal import Decimal
from pathlib import Path

import pytest

from kit.workloads.answers import extract, is_correct

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gsm8k"
# What a person reading each recorded response takes as its final answer (None: it gives none), per
# weight format: the shipped Q4_1, its F16 dequantization, Q8_0 and Q4_0 requantized from that F16.
READ_BY_HAND = {
    "Q4_1": {"gsm8k-0": "520", "gsm8k-1": "16", "gsm8k-2": "100", "gsm8k-3": "27", "gsm8k-4": "28", "gsm8k-5": None,
             "gsm8k-6": "20", "gsm8k-7": None, "gsm8k-8": "4", "gsm8k-9": None, "gsm8k-10": None, "gsm8k-11": "25"},
    # gsm8k-2 ends "The answer is 150% of $80,000 = $1,000.": the stated answer is 1,000
    "F16": {"gsm8k-0": None, "gsm8k-1": "4", "gsm8k-2": "1000", "gsm8k-3": "540", "gsm8k-4": "4000", "gsm8k-5": None,
            "gsm8k-6": "20", "gsm8k-7": "0", "gsm8k-8": "4", "gsm8k-9": "144", "gsm8k-10": "120", "gsm8k-11": "225"},
    "Q8_0": {"gsm8k-0": None, "gsm8k-1": "4", "gsm8k-2": "1600", "gsm8k-3": "540", "gsm8k-4": None, "gsm8k-5": "32",
             "gsm8k-6": "20", "gsm8k-7": None, "gsm8k-8": "120", "gsm8k-9": "120", "gsm8k-10": "120",
             "gsm8k-11": "225"},
    # gsm8k-11 numbers its steps "##### 6" ... "##### 27" and answers "The answer is 216." each time
    "Q4_0": {"gsm8k-0": None, "gsm8k-1": "24", "gsm8k-2": None, "gsm8k-3": None, "gsm8k-4": None, "gsm8k-5": "166",
             "gsm8k-6": None, "gsm8k-7": None, "gsm8k-8": "1644", "gsm8k-9": None, "gsm8k-10": "133.5",
             "gsm8k-11": "216"},
}
RECORDED = [(fmt, json.loads(line)) for fmt in READ_BY_HAND
            for line in (FIXTURES / ("smollm2_outputs.jsonl" if fmt == "Q4_1" else f"smollm2_outputs-{fmt}.jsonl"))
            .read_text().splitlines()]


@pytest.mark.parametrize(("fmt", "row"), RECORDED, ids=[f"{fmt}-{row['id']}" for fmt, row in RECORDED])
def test_recorded_smollm2_answers(fmt, row):
    answer, _ = extract(row["text"])
    expected = READ_BY_HAND[fmt][row["id"]]
    assert answer == (Decimal(expected) if expected else None)
    assert is_correct(row["text"], row["reference"]) == (expected is not None and Decimal(expected) ==
                                                         Decimal(row["reference"].replace(",", "")))


def test_every_format_recorded_the_same_twelve_items():
    ids = {fmt: [row["id"] for f, row in RECORDED if f == fmt] for fmt in READ_BY_HAND}
    assert all(found == [f"gsm8k-{i}" for i in range(12)] for found in ids.values())


@pytest.mark.parametrize("text, number, rule", [
    ("so she has 18 left.\n#### 18", "18", "hashes"),
    ("The total is \\boxed{1,250}.", "1250", "boxed"),
    ("Therefore the answer is: $72.50", "72.5", "answer is"),
    ("She keeps\n**36**\n", "36", "bold at line end"),
    ("#### 5\nThe answer is 6", "5", "hashes"),  # the requested form wins
    ("The answer is 150% of $80,000 = $1,000.", "1000", "answer is"),  # an equation states its right side
    ("##### 3\nThe answer is 216.", "216", "answer is"),  # five hashes are a heading, not the answer form
])
def test_other_forms(text, number, rule):
    assert extract(text) == (Decimal(number), rule)


def test_numbers_compare_numerically_not_as_strings():
    assert is_correct("#### 1,200.00", "1200")
    assert not is_correct("#### 12", "120")
    assert not is_correct("no number here", "3")
