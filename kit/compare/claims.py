"""The paper's qualitative findings (kit/compare/claims.yaml), judged on a run whatever its model or scale:
per claim, holds / does not hold / inconclusive / not measured, with the counts that decided it.

This is the verdict beside the numeric one of kit.compare.verdicts: "consistent with the published value"
stays reserved for a run comparable with the paper's; a claim says whether the paper's finding holds on
this run. `kit compare` writes the claims as compare-claims.json and .md (kit verify recomputes them); the
demo, `kit show` and the report's headline give the one-line summary (`summary_line`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kit.compare.claim_rules import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, RULES, VERDICTS, Judgement
from kit.compare.evidence import Evidence
from kit.core.packaged_yaml import read_yaml, validated
from kit.core.terminal_text import one_line

SCHEMA = "kit.claims/1"
STEM = "compare-claims"
TABLE_ORDER = ("III", "IV", "V", "VI", "VII")


class Claim(BaseModel):
    """One qualitative finding of the paper and the rule (kit.compare.claim_rules) that decides it on a run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^(III|IV|V|VI|VII)/[a-z0-9-]+$")
    table: Literal["III", "IV", "V", "VI", "VII"]
    statement: str = Field(min_length=1)
    rule: str
    decides: str = Field(min_length=1)
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _known(self) -> Claim:
        if self.rule not in RULES:
            raise ValueError(f"rule {self.rule!r} is not one of {', '.join(RULES)}")
        if RULES[self.rule][0] != self.table:
            raise ValueError(f"rule {self.rule!r} reads Table {RULES[self.rule][0]}, not Table {self.table}")
        if not self.id.startswith(f"{self.table}/"):
            raise ValueError(f"id {self.id!r} starts with its table ({self.table}/)")
        return self


class Claims(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    claims: list[Claim] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Claims:
        ids = [c.id for c in self.claims]
        if len(set(ids)) != len(ids):
            raise ValueError(f"claim id {next(i for i in ids if ids.count(i) > 1)!r} used twice")
        return self


def _where(loc: tuple[Any, ...], data: Any) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "(top level)"


def parse_claims(data: Any, origin: str) -> Claims:
    return validated(Claims, data, origin, _where, "fix that claim")


@cache
def _packaged() -> Claims:
    return parse_claims(*read_yaml("kit.compare", "claims.yaml", None, "claims"))


def load_claims(path: Path | None = None) -> Claims:
    """The claims the kit ships (kit/compare/claims.yaml), or the YAML file at `path`."""
    return _packaged() if path is None else parse_claims(*read_yaml("kit.compare", "", path, "claims"))


@dataclass(frozen=True)
class Judged:
    """A claim with its verdict on this run."""

    claim: Claim
    judgement: Judgement

    def to_json(self) -> dict[str, Any]:
        return {"id": self.claim.id, "table": f"Table {self.claim.table}", "statement": self.claim.statement,
                "verdict": self.judgement.verdict, "counts": self.judgement.counts, "rule": self.claim.decides,
                "source": self.claim.source}


def judge(evidence: Evidence, claims: Claims | None = None) -> list[Judged]:
    """Every claim judged on the evidence, in the order of claims.yaml."""
    return [Judged(c, RULES[c.rule][1](evidence)) for c in (claims or load_claims()).claims]


def counts(judged: list[Judged]) -> dict[str, int]:
    return {v: sum(j.judgement.verdict == v for j in judged) for v in VERDICTS}


def _per_table(judged: list[Judged]) -> str:
    tables = [t for t in TABLE_ORDER if any(j.claim.table == t and j.judgement.verdict != NOT_MEASURED
                                            for j in judged)]
    parts = []
    for t in tables:
        mine = [j for j in judged if j.claim.table == t and j.judgement.verdict != NOT_MEASURED]
        parts.append(f"Table {t} {sum(j.judgement.verdict == HOLDS for j in mine)}/{len(mine)}")
    return ", ".join(parts)


def summary_line(judged: list[Judged]) -> str:
    """One line: do the paper's qualitative findings hold on this run (claims measured, per table), distinct
    from the numeric verdict ("consistent with the published value") of a comparable run."""
    found = counts(judged)
    measured = len(judged) - found[NOT_MEASURED]
    if measured == 0:
        return "qualitative: no finding of the paper is measured by this run"
    where = f"{measured} claim{'s' if measured != 1 else ''} measured: {_per_table(judged)}"
    if found[HOLDS] == measured:
        return f"qualitative: the paper's findings hold on this run ({where})"
    failed = [f"{j.claim.id} ({j.claim.statement})" for j in judged if j.judgement.verdict == FAILS]
    unsure = [j.claim.id for j in judged if j.judgement.verdict == INCONCLUSIVE]
    tail = (f"; does not hold: {'; '.join(failed)}" if failed else "") + (
        f"; inconclusive: {', '.join(unsure)}" if unsure else "")
    return f"qualitative: {found[HOLDS]} of the paper's {measured} measured findings hold on this run ({where}){tail}"


def claim_lines(judged: list[Judged], measured_only: bool = False) -> list[str]:
    """One line per claim: `Table IV, each path reproduces itself: holds (counts)`."""
    return [one_line(f"Table {j.claim.table}, {j.claim.statement}: {j.judgement.verdict} ({j.judgement.counts})")
            for j in judged if not (measured_only and j.judgement.verdict == NOT_MEASURED)]


def not_measured_tables(judged: list[Judged]) -> list[str]:
    """The tables none of whose claims this run measures."""
    return [f"Table {t}" for t in TABLE_ORDER if all(j.judgement.verdict == NOT_MEASURED
                                                     for j in judged if j.claim.table == t)]


def document(judged: list[Judged], evidence: Evidence, created: str, findings: str,
             findings_created: str | None) -> dict[str, Any]:
    """compare-claims.json: the summary, the counts per verdict and every claim with its verdict and counts."""
    return {"schema": SCHEMA, "created": created, "findings": findings, "findings_created": findings_created,
            "evidence": evidence.source, "summary": summary_line(judged), "counts": counts(judged),
            "claims": [j.to_json() for j in judged]}


def _md(text: Any) -> str:
    return one_line(str(text)).replace("\\", "\\\\").replace("|", "\\|")


def markdown(doc: dict[str, Any]) -> str:
    """compare-claims.md: the summary, what the verdicts mean, and one row per claim."""
    out = ["# The paper's qualitative findings on this run (seed 000)", "",
           f"Findings: `{_md(doc['findings'])}` (analysed {_md(doc['findings_created'])}). Written "
           f"{_md(doc['created'])} by `kit compare`.", "", f"**{_md(doc['summary'])}**", "",
           "A claim is judged on this run whatever its model, format or scale: it says whether the paper's finding "
           "holds here, not whether the numbers match the published ones (compare-paper.md: \"consistent\" is kept "
           "for runs comparable with the paper's).", "",
           "| table | claim | verdict | counts | decided by |", "|---|---|---|---|---|"]
    out += ["| " + " | ".join(_md(c[k]) for k in ("table", "statement", "verdict", "counts", "rule")) + " |"
            for c in doc["claims"]]
    return "\n".join(out) + "\n"

