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
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ctxwin_dagster.core.evaluation.review_form import COMPLEXITIES, CSV_COLUMNS, LABELS, html_form

__all__ = [
    "COMPLEXITIES",
    "CSV_COLUMNS",
    "LABELS",
    "ReviewFormatError",
    "agreement",
    "export_review",
    "import_review",
    "table4",
]

KEY_VERSION = 2
#: The label of a pair of identical answers, recorded as a tie without asking anyone.
IDENTICAL = "identical"
#: The complexity of a tie whose records carry none (nobody was asked).
UNRATED = "unrated"
#: An inline citation as the answerers write it: ``[chunk_id]`` (hex ids of 12 or more characters).
_CITATION = re.compile(r"\s*\[([0-9a-f]{12,})\]")
_MAX_PROBLEMS = 20


class ReviewFormatError(ValueError):
    """A filled review file is invalid; the message names the file, the rows and the fixes."""


def _by_qid(records: Iterable[Mapping[str, Any]], name: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for i, r in enumerate(records):
        qid = r.get("question_id")
        if qid in (None, ""):
            raise ValueError(f"{name} record {i} has no question_id")
        qid = str(qid)
        if qid in out:
            raise ValueError(f"{name} has question_id {qid!r} twice; keep one answer per question")
        out[qid] = r
    return out


def _answer_text(r: Mapping[str, Any]) -> str:
    answer = str(r.get("answer") or "")
    if not answer.strip() and r.get("not_found"):
        return "(no answer: not found in the document)"
    return answer


def _plain(answer: str) -> str:
    """The answer without its citation markers and extra spaces: what makes two answers the same."""
    return " ".join(_CITATION.sub(" ", answer).split())


def _sentences(answer: str) -> list[str]:
    """The sentences of an answer, without citation markers, in sorted order: two answers made of
    the same sentences in another order are the same answer.

    >>> _sentences("B is second. A is first [0123456789abcdef].") == _sentences("A is first. B is second.")
    True
    """
    from ctxwin_dagster.core.text.sentences import split_sentences

    text = re.sub(r"\s+([.,;:!?])", r"\1", _plain(answer))  # a marker before a full stop leaves a space
    return sorted(" ".join(text[s:e].split()) for s, e in split_sentences(text))


#: Characters of the document shown on each side of a reference span in the review form.
REFERENCE_MARGIN = 300


def _reference_passage(
    r: Mapping[str, Any], document_text: Callable[[str], str | None] | None
) -> dict[str, Any] | None:
    """The passage of the document that holds the reference answer (its ``reference_spans``,
    marked, with :data:`REFERENCE_MARGIN` characters around), or None when the item gives no
    span or the document cannot be read."""
    spans = [(int(s), int(e)) for s, e in (r.get("reference_spans") or []) if int(e) > int(s)]
    doc_id = str(r.get("doc_id") or "")
    text = document_text(doc_id) if (spans and document_text is not None) else None
    if not text or spans[-1][1] > len(text):
        return None
    start, end = max(0, spans[0][0] - REFERENCE_MARGIN), min(len(text), spans[-1][1] + REFERENCE_MARGIN)
    marks = [(s - start, e - start) for s, e in spans if start <= s and e <= end]
    return {"doc_id": doc_id, "start": start, "end": end, "text": text[start:end], "marks": marks}


def _cited(r: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """(the answer with its citations numbered [1], [2] …, the cited passages). A passage is the
    context window (or, in records written before answers carried numbered citations, the
    retrieved chunk) a marker points into, with its document offsets and ``marks``: the spans of
    the sentences the answer took from it."""
    from ctxwin_dagster.core.text.sentences import split_sentences

    answer = _answer_text(r)
    numbered = [c for c in (r.get("citations") or []) if isinstance(c, Mapping) and c.get("marker")]
    if numbered:
        return answer, _passages_of_citations(numbered, r)
    chunks = {str(c.get("chunk_id")): c for c in (r.get("retrieved") or []) if isinstance(c, Mapping)}
    numbers: dict[str, int] = {}
    quoted: dict[str, list[str]] = {}
    parts = _CITATION.split(answer)  # text, id, text, id, …, text
    for i in range(1, len(parts), 2):
        cid = parts[i]
        numbers.setdefault(cid, len(numbers) + 1)
        said = parts[i - 1]
        quoted.setdefault(cid, []).extend(said[s:e].strip() for s, e in split_sentences(said))
    shown = _CITATION.sub(lambda m: f" [{numbers[m.group(1)]}]", answer).strip()
    passages = []
    for cid, n in numbers.items():
        chunk = chunks.get(cid) or {}
        text = str(chunk.get("text") or "")
        marks = sorted({(i, i + len(q)) for q in quoted.get(cid, []) if len(q) >= 10 and (i := text.find(q)) >= 0})
        passages.append(
            {
                "n": n,
                "chunk_id": cid,
                "doc_id": str(chunk.get("doc_id") or r.get("doc_id") or ""),
                "start": chunk.get("start"),
                "end": chunk.get("end"),
                "text": text,
                "marks": marks,
            }
        )
    return shown, passages


def _passages_of_citations(citations: list[Mapping[str, Any]], r: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The passages of an answer's numbered citations: per marker, the context window that holds
    its spans, the spans marked; a span in no window is shown by itself."""
    windows = [
        (int(span[0]), int(span[1]), str(span[2]), str(text))
        for span, text in zip(r.get("context_spans") or [], r.get("contexts") or [])
        if len(span) >= 3
    ]
    by_marker: dict[int, list[Mapping[str, Any]]] = {}
    for c in citations:
        by_marker.setdefault(int(c["marker"]), []).append(c)
    passages = []
    for n, group in sorted(by_marker.items()):
        first = group[0]
        doc, start, end = str(first.get("doc_id") or ""), int(first["start"]), int(first["end"])
        window = next((w for w in windows if w[2] == doc and w[0] <= start and end <= w[1]), None)
        if window is None:
            text = str(first.get("excerpt") or "")
            passages.append(
                {"n": n, "chunk_id": first.get("chunk_id"), "doc_id": doc, "start": start, "end": end, "text": text}
                | {"marks": [(0, len(text))]}
            )
            continue
        ws, we, _, text = window
        marks = sorted(
            (int(c["start"]) - ws, int(c["end"]) - ws) for c in group if ws <= int(c["start"]) and int(c["end"]) <= we
        )
        passages.append(
            {"n": n, "chunk_id": first.get("chunk_id"), "doc_id": doc, "start": ws, "end": we, "text": text}
            | {"marks": marks}
        )
    return passages


def _cited_cell(passages: list[dict[str, Any]]) -> str:
    """The cited passages as one CSV cell: ``[n] doc_id start–end: text`` per passage."""
    out = []
    for p in passages:
        where = f"{p['start']}–{p['end']}" if p["start"] is not None else "(not among the retrieved chunks)"
        out.append(f"[{p['n']}] {p['doc_id']} {where}: {' '.join(p['text'].split())}")
    return "\n".join(out)


def _complexity(ra: Mapping[str, Any], rb: Mapping[str, Any]) -> str:
    for r in (ra, rb):
        c = r.get("complexity") or (r.get("meta") or {}).get("complexity")
        if c:
            c = str(c).strip().lower()
            if c in COMPLEXITIES:
                return c
    return ""


def export_review(
    records_a: Iterable[Mapping[str, Any]],
    records_b: Iterable[Mapping[str, Any]],
    *,
    variant_a: str,
    variant_b: str,
    out_dir: str | Path,
    seed: int,
    title: str | None = None,
    document_text: Callable[[str], str | None] | None = None,
) -> dict[str, Any]:
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
    rows, sides, passages, identical = [], {}, {}, {}
    for qid in order:
        ra, rb = a[qid], b[qid]
        swap = rng.random() < 0.5
        question = str(ra.get("question") or rb.get("question") or "")
        if _sentences(_answer_text(ra)) == _sentences(_answer_text(rb)):
            identical[qid] = {"question": question, "complexity": _complexity(ra, rb)}
            continue
        side_a, side_b = (variant_b, variant_a) if swap else (variant_a, variant_b)
        first, second = (rb, ra) if swap else (ra, rb)
        sides[qid] = {"A": side_a, "B": side_b}
        (answer_a, cited_a), (answer_b, cited_b) = _cited(first), _cited(second)
        passages[qid] = (cited_a, cited_b, _reference_passage(ra if ra.get("reference_spans") else rb, document_text))
        rows.append(
            {
                "question_id": qid,
                "doc_id": str(ra.get("doc_id") or rb.get("doc_id") or ""),
                "question": question,
                "reference_answer": str(ra.get("reference_answer") or rb.get("reference_answer") or ""),
                "answer_A": answer_a,
                "answer_B": answer_b,
                "cited_A": _cited_cell(cited_a),
                "cited_B": _cited_cell(cited_b),
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


def _canonical(value: str, allowed: tuple[str, ...]) -> str | None:
    v = " ".join(str(value or "").split()).lower()
    for a in allowed:
        if v == a.lower():
            return a
    return None


def import_review(csv_path: str | Path, key_path: str | Path, *, allow_missing: bool = False) -> pd.DataFrame:
    """Read a filled review CSV, validate it against the key and un-blind it.

    Labels and complexities are matched ignoring case and extra spaces. Every problem is
    reported at once in a :class:`ReviewFormatError` naming the file, the CSV line and the fix.
    Questions of the key missing from the CSV are an error unless ``allow_missing``.

    Returns one row per question: ``question_id, question, complexity, label, answer_A,
    answer_B, variant_A, variant_B, outcome`` where ``outcome`` is ``"<variant> preferred"``,
    ``"both equal"`` or ``"both wrong"``. The key's identical pairs are added as ties (label
    ``"identical"``, outcome ``"both equal"``, complexity ``"unrated"`` unless the records gave
    one). ``df.attrs`` holds ``variant_a``, ``variant_b``, ``n_missing`` and ``n_identical``.
    """
    csv_path, key_path = Path(csv_path), Path(key_path)
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
    va, vb, sides = key["variant_a"], key["variant_b"], key["sides"]
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
    problems: list[str] = []
    seen: dict[str, int] = {}
    out_rows = []
    for i, row in enumerate(raw_rows):
        line = i + 2  # header is line 1
        where = f"{csv_path}: row {line}"
        qid = (row.get("question_id") or "").strip()
        if not qid:
            problems.append(f"{where}: empty question_id; restore it from the exported file")
            continue
        if qid not in sides:
            problems.append(
                f"{where}: question_id {qid!r} is not in {key_path.name}; use the key exported with this CSV"
            )
            continue
        if qid in seen:
            problems.append(f"{where}: question_id {qid!r} already on row {seen[qid]}; keep one row per question")
            continue
        seen[qid] = line
        label = _canonical(row.get("label", ""), LABELS)
        if label is None:
            got = (row.get("label") or "").strip()
            fix = "fill it in" if not got else f"{got!r} is not a label"
            problems.append(
                f"{where} (question_id {qid!r}): label {fix}; use one of {', '.join(repr(x) for x in LABELS)}"
            )
        complexity = _canonical(row.get("complexity", ""), COMPLEXITIES)
        if complexity is None:
            got = (row.get("complexity") or "").strip()
            fix = "fill it in" if not got else f"{got!r} is not a complexity"
            problems.append(f"{where} (question_id {qid!r}): complexity {fix}; use 'simple' or 'complex'")
        if label is None or complexity is None:
            continue
        side = sides[qid]
        if label == "A better":
            outcome = f"{side['A']} preferred"
        elif label == "B better":
            outcome = f"{side['B']} preferred"
        elif label == "both good":
            outcome = "both equal"
        else:
            outcome = "both wrong"
        out_rows.append(
            {
                "question_id": qid,
                "question": row.get("question", ""),
                "complexity": complexity,
                "label": label,
                "answer_A": row.get("answer_A", ""),
                "answer_B": row.get("answer_B", ""),
                "variant_A": side["A"],
                "variant_B": side["B"],
                "outcome": outcome,
            }
        )
    # Identical answers were not asked: they are ties, counted as such.
    for qid, tie in sorted((key.get("identical") or {}).items()):
        out_rows.append(
            {
                "question_id": qid,
                "question": tie.get("question", ""),
                "complexity": tie.get("complexity") or UNRATED,
                "label": IDENTICAL,
                "answer_A": "",
                "answer_B": "",
                "variant_A": va,
                "variant_B": vb,
                "outcome": "both equal",
            }
        )
    absent = sorted(set(sides) - set(seen))
    if absent and not allow_missing:
        shown = ", ".join(repr(q) for q in absent[:10]) + (" …" if len(absent) > 10 else "")
        problems.append(
            f"{csv_path}: {len(absent)} question(s) of the key have no row ({shown}); "
            "restore their rows and label them, or pass allow_missing=True"
        )
    if problems:
        more = f"\n… and {len(problems) - _MAX_PROBLEMS} more" if len(problems) > _MAX_PROBLEMS else ""
        raise ReviewFormatError(
            f"{len(problems)} problem(s) in the review:\n" + "\n".join(problems[:_MAX_PROBLEMS]) + more
        )
    df = pd.DataFrame(
        out_rows,
        columns=[
            "question_id",
            "question",
            "complexity",
            "label",
            "answer_A",
            "answer_B",
            "variant_A",
            "variant_B",
            "outcome",
        ],
    )
    df.attrs["variant_a"] = va
    df.attrs["variant_b"] = vb
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
