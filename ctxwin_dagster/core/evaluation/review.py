"""Blinded human review of two variants' answers, and the paper's Table 4 from it.

:func:`export_review` writes, into ``out_dir``:

* ``review.csv`` — one row per question whose two answers differ, in random order:
  ``question_id, doc_id, question, reference_answer, answer_A, answer_B, cited_A, cited_B,
  label, complexity``. Which variant is "A" is drawn per question; the answers' citation
  markers are numbered ``[1]``, ``[2]`` … and ``cited_*`` lists those passages with their
  document offsets; ``label`` is empty for the reviewer to fill, ``complexity`` is pre-filled
  when the records carry one;
* ``review.html`` — the same as a static form (no server): per question the document's name,
  the reference answer, both answers and each answer's cited passages, with the sentences the
  answer took from them highlighted. The reviewer picks a label and a complexity per question
  and presses "Download CSV", which saves a ``review.csv`` with the same columns (inline
  JavaScript, nothing is sent anywhere);
* ``key.json`` — which variant is A and B per question, and the questions whose two answers are
  identical: those are recorded as ties ("both equal") without asking anyone, and counted.
  Keep the key away from the reviewer.

:func:`import_review` reads a filled CSV with the key, validates every row (errors name the
file, the row and the fix) and un-blinds it, the identical pairs added as ties; :func:`table4`
counts, per complexity, "<variant_a> preferred / <variant_b> preferred / both equal / both
wrong" (and how many of the ties were identical answers); :func:`agreement` gives the agreement
of several reviewers of the same export (raw, and Cohen's kappa per pair of reviewers).

Labels: ``"A better"``, ``"B better"``, ``"both good"``, ``"both wrong"``. Complexity:
``"simple"``, ``"complex"``.

Plain Python (pandas for the returned tables): no dagster, ragas or lancedb.

Example::

    >>> import tempfile, pathlib
    >>> a = [{"question_id": "q1", "question": "Q?", "answer": "x", "complexity": "simple"}]
    >>> b = [{"question_id": "q1", "question": "Q?", "answer": "y"}]
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> paths = export_review(a, b, variant_a="t_rag", variant_b="swb_rag", out_dir=out, seed=1)
    >>> text = paths["csv"].read_text(encoding="utf-8")     # a reviewer fills in the label
    >>> _ = paths["csv"].write_text(text.replace(",,simple", ",both good,simple"), encoding="utf-8")
    >>> int(table4(import_review(paths["csv"], paths["key"])).loc["simple", "both equal"])
    1
    >>> export_review(a, a, variant_a="t_rag", variant_b="swb_rag", out_dir=out, seed=1)["identical"]
    1
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypedDict

import pandas as pd

from ctxwin_dagster.core.evaluation.review_form import COMPLEXITIES, CSV_COLUMNS, LABELS, html_form
from ctxwin_dagster.core.evaluation.review_passages import (
    PairPassages,
    answer_sentences,
    answer_text,
    cited_cell,
    cited_passages,
    reference_passage,
)
from ctxwin_dagster.core.evaluation.review_reading import IDENTICAL, UNRATED, Unblinding, read_key, read_rows

__all__ = [
    "COMPLEXITIES",
    "CSV_COLUMNS",
    "LABELS",
    "ExportedReview",
    "agreement",
    "export_review",
    "import_review",
    "table4",
]

KEY_VERSION = 2
#: The columns of :func:`import_review`'s frame.
_REVIEW_COLUMNS = [
    "question_id",
    "question",
    "complexity",
    "label",
    "answer_A",
    "answer_B",
    "variant_A",
    "variant_B",
    "outcome",
]


class ExportedReview(TypedDict):
    """What :func:`export_review` returns (see there)."""

    csv: Path
    html: Path
    key: Path
    n_questions: int
    identical: int
    unpaired: list[str]


def _by_qid(records: Iterable[Mapping[str, object]], name: str) -> dict[str, Mapping[str, object]]:
    out: dict[str, Mapping[str, object]] = {}
    for i, r in enumerate(records):
        qid = r.get("question_id")
        if qid in (None, ""):
            raise ValueError(f"{name} record {i} has no question_id")
        qid = str(qid)
        if qid in out:
            raise ValueError(f"{name} has question_id {qid!r} twice; keep one answer per question")
        out[qid] = r
    return out


def _complexity(ra: Mapping[str, object], rb: Mapping[str, object]) -> str:
    for r in (ra, rb):
        meta = r.get("meta")
        c = r.get("complexity") or (meta.get("complexity") if isinstance(meta, Mapping) else None)
        if c:
            c = str(c).strip().lower()
            if c in COMPLEXITIES:
                return c
    return ""


def export_review(
    records_a: Iterable[Mapping[str, object]],
    records_b: Iterable[Mapping[str, object]],
    *,
    variant_a: str,
    variant_b: str,
    out_dir: str | Path,
    seed: int,
    title: str | None = None,
    document_text: Callable[[str], str | None] | None = None,
) -> ExportedReview:
    """Write the blinded review files for the questions both variants answered.

    ``document_text(doc_id)`` gives a document's text (as the index read it): the form then
    shows, under the reference answer, the passage of the document that holds it (the item's
    ``reference_spans``).

    Returns ``{"csv", "html", "key"}`` paths plus ``n_questions`` (the pairs to judge),
    ``identical`` (pairs of identical answers, recorded as ties in ``key.json`` and not asked)
    and ``unpaired`` (question ids answered by only one variant, left out of the review and
    listed in ``key.json`` too).
    """
    if not variant_a or not variant_b or variant_a == variant_b:
        raise ValueError(f"variant_a and variant_b must be two different names; got {variant_a!r}, {variant_b!r}")
    a = _by_qid(records_a, f"records_a ({variant_a})")
    b = _by_qid(records_b, f"records_b ({variant_b})")
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(f"{variant_a} and {variant_b} share no question_id; export the answers of the same QA set")
    unpaired = sorted(set(a) ^ set(b))
    rng = random.Random(seed)
    order = common[:]
    rng.shuffle(order)
    rows: list[dict[str, str]] = []
    sides: dict[str, dict[str, str]] = {}
    passages: dict[str, PairPassages] = {}
    identical: dict[str, dict[str, str]] = {}
    for qid in order:
        ra, rb = a[qid], b[qid]
        swap = rng.random() < 0.5
        question = str(ra.get("question") or rb.get("question") or "")
        if answer_sentences(answer_text(ra)) == answer_sentences(answer_text(rb)):
            identical[qid] = {"question": question, "complexity": _complexity(ra, rb)}
            continue
        side_a, side_b = (variant_b, variant_a) if swap else (variant_a, variant_b)
        first, second = (rb, ra) if swap else (ra, rb)
        sides[qid] = {"A": side_a, "B": side_b}
        (answer_a, cited_a), (answer_b, cited_b) = cited_passages(first), cited_passages(second)
        passages[qid] = (cited_a, cited_b, reference_passage(ra if ra.get("reference_spans") else rb, document_text))
        rows.append(
            {
                "question_id": qid,
                "doc_id": str(ra.get("doc_id") or rb.get("doc_id") or ""),
                "question": question,
                "reference_answer": str(ra.get("reference_answer") or rb.get("reference_answer") or ""),
                "answer_A": answer_a,
                "answer_B": answer_b,
                "cited_A": cited_cell(cited_a),
                "cited_B": cited_cell(cited_b),
                "label": "",
                "complexity": _complexity(ra, rb),
            }
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, html_path, key_path = out / "review.csv", out / "review.html", out / "key.json"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(CSV_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    key = {
        "version": KEY_VERSION,
        "variant_a": variant_a,
        "variant_b": variant_b,
        "seed": seed,
        "n_questions": len(rows),
        "sides": sides,
        "identical": identical,
        "unpaired": unpaired,
    }
    key_path.write_text(json.dumps(key, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    html_path.write_text(html_form(rows, passages, title or "Answer review", len(identical)), encoding="utf-8")
    return {
        "csv": csv_path,
        "html": html_path,
        "key": key_path,
        "n_questions": len(rows),
        "identical": len(identical),
        "unpaired": unpaired,
    }


def import_review(csv_path: str | Path, key_path: str | Path, *, allow_missing: bool = False) -> pd.DataFrame:
    """Read a filled review CSV, validate it against the key and un-blind it.

    Labels and complexities are matched ignoring case and extra spaces. Every problem is
    reported at once in a
    :class:`~ctxwin_dagster.core.evaluation.review_reading.ReviewFormatError` naming the file, the CSV line and the fix.
    Questions of the key missing from the CSV are an error unless ``allow_missing``.

    Returns one row per question: ``question_id, question, complexity, label, answer_A,
    answer_B, variant_A, variant_B, outcome`` where ``outcome`` is ``"<variant> preferred"``,
    ``"both equal"`` or ``"both wrong"``. The key's identical pairs are added as ties (label
    ``"identical"``, outcome ``"both equal"``, complexity ``"unrated"`` unless the records gave
    one). ``df.attrs`` holds ``variant_a``, ``variant_b``, ``n_missing`` and ``n_identical``.
    """
    csv_path, key_path = Path(csv_path), Path(key_path)
    key = read_key(key_path)
    raw_rows = read_rows(csv_path)
    reading = Unblinding(csv_path, key_path, key)
    for i, row in enumerate(raw_rows):
        reading.read(row, i + 2)  # header is line 1
    reading.add_ties()
    absent = reading.absent(allow_missing)
    reading.raise_problems()
    df = pd.DataFrame(reading.rows, columns=_REVIEW_COLUMNS)
    df.attrs["variant_a"] = key.variant_a
    df.attrs["variant_b"] = key.variant_b
    df.attrs["n_missing"] = len(absent)
    df.attrs["n_identical"] = int((df["label"] == IDENTICAL).sum())
    return df


def table4(df: pd.DataFrame, *, variant_a: str | None = None, variant_b: str | None = None) -> pd.DataFrame:
    """The paper's Table 4: counts per complexity (rows ``simple``, ``complex``, ``unrated`` when
    a tie has no complexity, ``total``).

    Columns: ``"<variant_a> preferred"``, ``"<variant_b> preferred"``, ``"both equal"``,
    ``"both wrong"``, ``"n"``, and ``"identical (not asked)"``: how many of the ties were pairs of
    identical answers. The variant names come from ``df.attrs`` (set by :func:`import_review`)
    unless given.
    """
    va = variant_a or df.attrs.get("variant_a")
    vb = variant_b or df.attrs.get("variant_b")
    if not va or not vb:
        raise ValueError("table4 needs the variant names: pass variant_a= and variant_b= (import_review sets them)")
    columns = [f"{va} preferred", f"{vb} preferred", "both equal", "both wrong"]
    unknown = sorted(set(df["outcome"]) - set(columns))
    if unknown:
        raise ValueError(f"outcomes {unknown} are not among {columns}; is the key of another pair of variants?")
    levels = list(COMPLEXITIES) + ([UNRATED] if (df["complexity"] == UNRATED).any() else [])
    table = pd.DataFrame(0, index=levels + ["total"], columns=columns + ["n", "identical (not asked)"], dtype=int)
    labels = df["label"] if "label" in df.columns else pd.Series([""] * len(df))
    for complexity, outcome, label in zip(df["complexity"], df["outcome"], labels):
        table.loc[complexity, outcome] += 1
        if label == IDENTICAL:
            table.loc[complexity, "identical (not asked)"] += 1
    table.loc["total", columns + ["identical (not asked)"]] = table.loc[
        levels, columns + ["identical (not asked)"]
    ].sum()
    table["n"] = table[columns].sum(axis=1)
    table.index.name = "complexity"
    return table


def agreement(reviews: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """How far several reviewers of one export agree: per pair of reviewers, on the questions
    both judged (identical answers left out: nobody judged them), the share of the same outcome
    and Cohen's kappa (agreement beyond chance; ``scikit-learn``'s ``cohen_kappa_score``).

    ``reviews`` maps a reviewer's name (e.g. the CSV file) to :func:`import_review`'s frame.
    Columns: ``reviewer_1, reviewer_2, n, agreement, kappa`` (kappa NaN when both gave one
    outcome throughout, where it is undefined).
    """
    from itertools import combinations

    from sklearn.metrics import cohen_kappa_score

    asked = {name: df[df["label"] != IDENTICAL].set_index("question_id")["outcome"] for name, df in reviews.items()}
    rows = []
    for (n1, s1), (n2, s2) in combinations(asked.items(), 2):
        common = s1.index.intersection(s2.index)
        a, b = s1.loc[common].tolist(), s2.loc[common].tolist()
        same = sum(x == y for x, y in zip(a, b))
        kappa = float("nan")
        if common.size and len(set(a) | set(b)) > 1:
            kappa = float(cohen_kappa_score(a, b))
        rows.append(
            {
                "reviewer_1": n1,
                "reviewer_2": n2,
                "n": int(common.size),
                "agreement": same / common.size if common.size else float("nan"),
                "kappa": kappa,
            }
        )
    return pd.DataFrame(rows, columns=["reviewer_1", "reviewer_2", "n", "agreement", "kappa"])
