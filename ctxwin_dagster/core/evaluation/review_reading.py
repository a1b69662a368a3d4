"""Reading a filled review back: the key of a review export, the rows of a filled CSV, and
their checks and un-blinding, every problem collected with the file, the line and the fix.
:func:`~ctxwin_dagster.core.evaluation.review.import_review` puts them together."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ctxwin_dagster.core.evaluation.review_form import COMPLEXITIES, CSV_COLUMNS, LABELS

__all__ = [
    "IDENTICAL",
    "UNRATED",
    "ReviewFormatError",
    "ReviewKey",
    "Unblinding",
    "outcome",
    "read_key",
    "read_rows",
]

#: The label of a pair of identical answers, recorded as a tie without asking anyone.
IDENTICAL = "identical"
#: The complexity of a tie whose records carry none (nobody was asked).
UNRATED = "unrated"
_MAX_PROBLEMS = 20


class ReviewFormatError(ValueError):
    """A filled review file is invalid; the message names the file, the rows and the fixes."""


def _canonical(value: str, allowed: tuple[str, ...]) -> str | None:
    v = " ".join(str(value or "").split()).lower()
    for a in allowed:
        if v == a.lower():
            return a
    return None


@dataclass(frozen=True, slots=True)
class ReviewKey:
    """A review key as :func:`export_review` writes it: the two variants, which is A and B per
    question, and the identical pairs (``question``, ``complexity``) recorded as ties."""

    variant_a: str
    variant_b: str
    sides: Mapping[str, Mapping[str, object]]
    identical: Mapping[str, Mapping[str, object]]


def read_key(key_path: Path) -> ReviewKey:
    try:
        key = json.loads(key_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ReviewFormatError(f"{key_path}: no such key file; pass the key.json written by export_review") from exc
    except ValueError as exc:
        raise ReviewFormatError(
            f"{key_path}: not valid JSON ({exc}); pass the key.json written by export_review"
        ) from exc
    if not isinstance(key, dict) or not {"variant_a", "variant_b", "sides"} <= set(key):
        raise ReviewFormatError(
            f"{key_path}: not a review key (needs variant_a, variant_b, sides); pass the key.json written by export_review"
        )
    return ReviewKey(key["variant_a"], key["variant_b"], key["sides"], key.get("identical") or {})


def read_rows(csv_path: Path) -> list[dict[str, str]]:
    """The rows of a filled review CSV (its header checked)."""
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            raw_rows = list(reader)
    except FileNotFoundError as exc:
        raise ReviewFormatError(f"{csv_path}: no such file") from exc
    missing_cols = [c for c in ("question_id", "label", "complexity") if c not in header]
    if missing_cols:
        raise ReviewFormatError(
            f"{csv_path}: missing column(s) {missing_cols}; the header must be {','.join(CSV_COLUMNS)} "
            "(save the file exported by export_review or by the HTML form)"
        )
    return raw_rows


def outcome(label: str, side: Mapping[str, object]) -> str:
    if label == "A better":
        return f"{side['A']} preferred"
    if label == "B better":
        return f"{side['B']} preferred"
    return "both equal" if label == "both good" else "both wrong"


@dataclass
class Unblinding:
    """The rows of a filled review read one by one against the key: the un-blinded rows, the
    questions seen (on which CSV line) and every problem found."""

    csv_path: Path
    key_path: Path
    key: ReviewKey
    rows: list[dict[str, object]] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def read(self, row: Mapping[str, str], line: int) -> None:
        """Check one CSV row (``line``: its line in the file) and un-blind it when valid."""
        where = f"{self.csv_path}: row {line}"
        qid = (row.get("question_id") or "").strip()
        if not qid:
            self.problems.append(f"{where}: empty question_id; restore it from the exported file")
            return
        if qid not in self.key.sides:
            self.problems.append(
                f"{where}: question_id {qid!r} is not in {self.key_path.name}; use the key exported with this CSV"
            )
            return
        if qid in self.seen:
            self.problems.append(
                f"{where}: question_id {qid!r} already on row {self.seen[qid]}; keep one row per question"
            )
            return
        self.seen[qid] = line
        where = f"{where} (question_id {qid!r})"
        label = self._choice(row, "label", LABELS, where, "one of " + ", ".join(repr(x) for x in LABELS))
        complexity = self._choice(row, "complexity", COMPLEXITIES, where, "'simple' or 'complex'")
        if label is None or complexity is None:
            return
        side = self.key.sides[qid]
        self.rows.append(
            {
                "question_id": qid,
                "question": row.get("question", ""),
                "complexity": complexity,
                "label": label,
                "answer_A": row.get("answer_A", ""),
                "answer_B": row.get("answer_B", ""),
                "variant_A": side["A"],
                "variant_B": side["B"],
                "outcome": outcome(label, side),
            }
        )

    def _choice(
        self, row: Mapping[str, str], column: str, allowed: tuple[str, ...], where: str, use: str
    ) -> str | None:
        """The row's ``column`` as one of ``allowed`` (case and spaces ignored), or None with the
        problem noted (``use``: the values to use)."""
        value = _canonical(row.get(column, ""), allowed)
        if value is None:
            got = (row.get(column) or "").strip()
            fix = "fill it in" if not got else f"{got!r} is not a {column}"
            self.problems.append(f"{where}: {column} {fix}; use {use}")
        return value

    def add_ties(self) -> None:
        """Identical answers were not asked: they are ties, counted as such."""
        for qid, tie in sorted(self.key.identical.items()):
            self.rows.append(
                {
                    "question_id": qid,
                    "question": tie.get("question", ""),
                    "complexity": tie.get("complexity") or UNRATED,
                    "label": IDENTICAL,
                    "answer_A": "",
                    "answer_B": "",
                    "variant_A": self.key.variant_a,
                    "variant_B": self.key.variant_b,
                    "outcome": "both equal",
                }
            )

    def absent(self, allow_missing: bool) -> list[str]:
        """The questions of the key without a row (a problem unless ``allow_missing``)."""
        absent = sorted(set(self.key.sides) - set(self.seen))
        if absent and not allow_missing:
            shown = ", ".join(repr(q) for q in absent[:10]) + (" …" if len(absent) > 10 else "")
            self.problems.append(
                f"{self.csv_path}: {len(absent)} question(s) of the key have no row ({shown}); "
                "restore their rows and label them, or pass allow_missing=True"
            )
        return absent

    def raise_problems(self) -> None:
        """Raise every problem found at once (the first :data:`_MAX_PROBLEMS`, then a count)."""
        if self.problems:
            problems = self.problems
            more = f"\n… and {len(problems) - _MAX_PROBLEMS} more" if len(problems) > _MAX_PROBLEMS else ""
            raise ReviewFormatError(
                f"{len(problems)} problem(s) in the review:\n" + "\n".join(problems[:_MAX_PROBLEMS]) + more
            )
