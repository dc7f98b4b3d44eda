"""Single-turn items: GSM8K from a local JSON-lines file, or word problems the kit makes itself."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from kit.core.errors import ConfigError

MATH_SYSTEM_PROMPT = (
    "You are a helpful assistant. Solve the math problem step by step and end your response with the final "
    "answer on its own line in the form #### <number>"
)


@dataclass(frozen=True)
class Item:
    """One single-turn problem: a stable id, the user's text and the reference answer."""

    id: str
    question: str
    answer: str


def load_gsm8k(path: Path, count: int, first: int = 0) -> list[Item]:
    """Items `first .. first+count-1` of a GSM8K JSON-lines file (fields `question`, `answer`)."""
    if not path.is_file():
        raise ConfigError(f"GSM8K file not found: {path}", "pass --gsm8k with the path of GSM8K's test.jsonl")
    items: list[Item] = []
    with path.open(encoding="utf-8") as fh:
        for index, line in enumerate(fh):
            if index < first or not line.strip():
                continue
            if len(items) == count:
                break
            try:
                row = json.loads(line)
                answer = row["answer"].rsplit("####", 1)[-1].strip()
                items.append(Item(id=f"gsm8k-{index}", question=row["question"], answer=answer))
            except (ValueError, KeyError, AttributeError) as exc:
                raise ConfigError(f"{path}:{index + 1} is not a GSM8K record ({exc})",
                                  "each line must be JSON with `question` and `answer` fields") from exc
    if len(items) < count:
        raise ConfigError(f"{path} has only {len(items)} items from index {first}, {count} requested",
                          "ask for fewer items (--items)")
    return items


_NAMES = ("Ana", "Bo", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kofi", "Lena")
_GOODS = ("apples", "stickers", "marbles", "pencils", "cookies", "stamps", "shells", "cards")


def _problem(rng: random.Random) -> tuple[str, int]:
    name, goods = rng.choice(_NAMES), rng.choice(_GOODS)
    boxes, per_box = rng.randint(3, 12), rng.randint(4, 25)
    total = boxes * per_box
    given = rng.randint(1, total - 1)
    bought = rng.randint(2, 40)
    kind = rng.randrange(3)
    if kind == 0:
        text = (f"{name} has {boxes} boxes with {per_box} {goods} in each box. {name} gives away {given} {goods} "
                f"and then buys {bought} more. How many {goods} does {name} have now?")
        return text, total - given + bought
    if kind == 1:
        price = rng.randint(2, 9)
        text = (f"{name} buys {boxes} packs of {goods}; each pack holds {per_box} {goods} and costs ${price}. "
                f"{name} pays with ${boxes * price + bought}. How much change, in dollars, does {name} get back?")
        return text, bought
    friends = rng.randint(2, 6)
    share = total // friends
    text = (f"{name} collects {boxes} bags of {goods} with {per_box} in each bag and shares them equally among "
            f"{friends} friends, keeping whatever is left over. How many {goods} does {name} keep?")
    return text, total - share * friends


def arithmetic_items(count: int, seed: int = 20261007) -> list[Item]:
    """`count` seeded multi-step arithmetic word problems, so a run needs no download."""
    rng = random.Random(seed)
    items = []
    for index in range(count):
        text, answer = _problem(rng)
        items.append(Item(id=f"arith-{seed}-{index}", question=text, answer=str(answer)))
    return items
