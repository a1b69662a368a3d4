"""Blinded human review of two variants' answers, and the paper's Table 4 from it.

:func:`export_review` writes, into ``out_dir``:

* ``review.csv`` — one row per question, in random order: ``question_id, question, answer_A,
  answer_B, label, complexity``. Which variant is "A" is drawn per question; ``label`` is empty
  for the reviewer to fill, ``complexity`` is pre-filled when the records carry one;
* ``review.html`` — the same as a static form (no server): the reviewer picks a label and a
  complexity per question and presses "Download CSV", which saves a ``review.csv`` with the
  same columns (inline JavaScript, nothing is sent anywhere);
* ``key.json`` — which variant is A and B per question. Keep it away from the reviewer.

:func:`import_review` reads a filled CSV with the key, validates every row (errors name the
file, the row and the fix) and un-blinds it; :func:`table4` counts, per complexity,
"<variant_a> preferred / <variant_b> preferred / both equal / both wrong".

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
"""

from __future__ import annotations

import csv
import html
import json
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "COMPLEXITIES",
    "CSV_COLUMNS",
    "LABELS",
    "ReviewFormatError",
    "export_review",
    "import_review",
    "table4",
]

LABELS: tuple[str, ...] = ("A better", "B better", "both good", "both wrong")
COMPLEXITIES: tuple[str, ...] = ("simple", "complex")
CSV_COLUMNS: tuple[str, ...] = ("question_id", "question", "answer_A", "answer_B", "label", "complexity")
KEY_VERSION = 1
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
) -> dict[str, Any]:
    """Write the blinded review files for the questions both variants answered.

    Returns ``{"csv", "html", "key"}`` paths plus ``n_questions`` and ``unpaired`` (question ids
    answered by only one variant, left out of the review and listed in ``key.json`` too).
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
    rows, sides = [], {}
    for qid in order:
        ra, rb = a[qid], b[qid]
        swap = rng.random() < 0.5
        side_a, side_b = (variant_b, variant_a) if swap else (variant_a, variant_b)
        first, second = (rb, ra) if swap else (ra, rb)
        sides[qid] = {"A": side_a, "B": side_b}
        rows.append(
            {
                "question_id": qid,
                "question": str(ra.get("question") or rb.get("question") or ""),
                "answer_A": _answer_text(first),
                "answer_B": _answer_text(second),
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
        "unpaired": unpaired,
    }
    key_path.write_text(json.dumps(key, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    html_path.write_text(_html_form(rows, title or "Answer review"), encoding="utf-8")
    return {"csv": csv_path, "html": html_path, "key": key_path, "n_questions": len(rows), "unpaired": unpaired}


_JS = r"""
function q(s){return '"'+String(s==null?'':s).replace(/"/g,'""')+'"';}
function buildCsv(){
  var cols=%(cols)s, lines=[cols.join(',')], missing=0;
  ITEMS.forEach(function(it,i){
    var lab=document.querySelector('input[name="label_'+i+'"]:checked');
    var cx=document.getElementById('complexity_'+i).value;
    if(!lab||!cx){missing++;}
    lines.push([it.question_id,it.question,it.answer_A,it.answer_B,lab?lab.value:'',cx].map(q).join(','));
  });
  return {csv:lines.join('\r\n')+'\r\n', missing:missing};
}
function downloadCsv(ev){
  if(ev){ev.preventDefault();}
  var r=buildCsv();
  document.getElementById('status').textContent=r.missing?(r.missing+' question(s) still lack a label or a complexity.'):'All questions labelled.';
  var blob=new Blob(['\ufeff'+r.csv],{type:'text/csv;charset=utf-8'});
  var a=document.createElement('a'); a.href=URL.createObjectURL(blob); a.download='review.csv';
  document.body.appendChild(a); a.click(); a.remove();
  return false;
}
"""


def _html_form(rows: list[dict[str, str]], title: str) -> str:
    esc = html.escape
    items = json.dumps(rows, ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\!--")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto;padding:1em}"
        "fieldset{margin:1em 0;border:1px solid #bbb}.ans{display:flex;gap:1em}"
        ".ans div{flex:1;white-space:pre-wrap;background:#f6f6f6;padding:.5em}"
        "label{margin-right:1em}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        "<p>For each question, compare answer A and answer B, pick a label and the question's "
        "complexity, then press <b>Download CSV</b> and send the file back. The page never "
        "sends anything; nothing is saved until you download.</p>",
        '<form id="review" onsubmit="return downloadCsv(event)">',
    ]
    for i, row in enumerate(rows):
        parts.append(f'<fieldset data-question-id="{esc(row["question_id"])}">')
        parts.append(f"<legend>{i + 1}. {esc(row['question'])}</legend>")
        parts.append(
            '<div class="ans">'
            f"<div><b>A</b><br>{esc(row['answer_A'])}</div>"
            f"<div><b>B</b><br>{esc(row['answer_B'])}</div></div><p>"
        )
        for label in LABELS:
            parts.append(
                f'<label><input type="radio" name="label_{i}" value="{esc(label)}" required> {esc(label)}</label>'
            )
        parts.append(f'</p><p><label>Complexity <select id="complexity_{i}" name="complexity_{i}">')
        parts.append('<option value="">(choose)</option>')
        for c in COMPLEXITIES:
            selected = " selected" if row["complexity"] == c else ""
            parts.append(f'<option value="{c}"{selected}>{c}</option>')
        parts.append("</select></label></p></fieldset>")
    parts.append('<p><button type="button" onclick="downloadCsv()">Download CSV</button> <span id="status"></span></p>')
    parts.append("</form>")
    parts.append(f"<script>\nvar ITEMS={items};\n{_JS % {'cols': json.dumps(list(CSV_COLUMNS))}}</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


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
    ``"both equal"`` or ``"both wrong"``; ``df.attrs`` holds ``variant_a`` and ``variant_b``.
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
    return df


def table4(df: pd.DataFrame, *, variant_a: str | None = None, variant_b: str | None = None) -> pd.DataFrame:
    """The paper's Table 4: counts per complexity (rows ``simple``, ``complex``, ``total``).

    Columns: ``"<variant_a> preferred"``, ``"<variant_b> preferred"``, ``"both equal"``,
    ``"both wrong"``, ``"n"``. The variant names come from ``df.attrs`` (set by
    :func:`import_review`) unless given.
    """
    va = variant_a or df.attrs.get("variant_a")
    vb = variant_b or df.attrs.get("variant_b")
    if not va or not vb:
        raise ValueError("table4 needs the variant names: pass variant_a= and variant_b= (import_review sets them)")
    columns = [f"{va} preferred", f"{vb} preferred", "both equal", "both wrong"]
    unknown = sorted(set(df["outcome"]) - set(columns))
    if unknown:
        raise ValueError(f"outcomes {unknown} are not among {columns}; is the key of another pair of variants?")
    table = pd.DataFrame(0, index=list(COMPLEXITIES) + ["total"], columns=columns + ["n"], dtype=int)
    for complexity, outcome in zip(df["complexity"], df["outcome"]):
        table.loc[complexity, outcome] += 1
    table.loc["total", columns] = table.loc[list(COMPLEXITIES), columns].sum()
    table["n"] = table[columns].sum(axis=1)
    table.index.name = "complexity"
    return table
