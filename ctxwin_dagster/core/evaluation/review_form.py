"""The static review form: one HTML page, no server, that shows each blinded pair with its
document, reference answer and cited passages, and saves the reviewer's labels as a CSV
(inline JavaScript; nothing is sent anywhere). :mod:`~ctxwin_dagster.core.evaluation.review`
writes it and reads the CSV back."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping

from ctxwin_dagster.core.evaluation.review_passages import CitedPassage, PairPassages, ReferencePassage

__all__ = ["COMPLEXITIES", "CSV_COLUMNS", "LABELS", "html_form"]

LABELS: tuple[str, ...] = ("A better", "B better", "both good", "both wrong")
COMPLEXITIES: tuple[str, ...] = ("simple", "complex")
CSV_COLUMNS: tuple[str, ...] = (
    "question_id",
    "doc_id",
    "question",
    "reference_answer",
    "answer_A",
    "answer_B",
    "cited_A",
    "cited_B",
    "label",
    "complexity",
)


_JS = r"""
function q(s){return '"'+String(s==null?'':s).replace(/"/g,'""')+'"';}
function buildCsv(){
  var cols=%(cols)s, lines=[cols.join(',')], missing=0;
  ITEMS.forEach(function(it,i){
    var lab=document.querySelector('input[name="label_'+i+'"]:checked');
    var cx=document.getElementById('complexity_'+i).value;
    if(!lab||!cx){missing++;}
    lines.push(cols.map(function(c){return c==='label'?(lab?lab.value:''):(c==='complexity'?cx:it[c]);}).map(q).join(','));
  });
  return {csv:lines.join('\r\n')+'\r\n', missing:missing};
}
function scrollToMarks(root){
  root.querySelectorAll('.passage').forEach(function(p){
    var m=p.querySelector('mark'); if(m){p.scrollTop=Math.max(0,m.offsetTop-24);}
  });
}
function itemDone(i){
  var lab=document.querySelector('input[name="label_'+i+'"]:checked');
  return lab&&document.getElementById('complexity_'+i).value?lab.value:null;
}
function onAnswer(i){
  var done=itemDone(i), state=document.getElementById('state_'+i);
  state.textContent=done?('done: '+done):'to judge';
  state.className='state'+(done?' done':'');
  if(done){var next=document.getElementById('item_'+(i+1)); if(next&&!itemDone(i+1)){next.open=true;}}
}
function foldAll(open){document.querySelectorAll('details.item').forEach(function(d){d.open=open;});}
window.addEventListener('load',function(){
  document.querySelectorAll('details.item').forEach(function(d){
    d.addEventListener('toggle',function(){if(d.open){scrollToMarks(d);}});
  });
  scrollToMarks(document);
});
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


def _highlighted(text: str, marks: list[tuple[int, int]]) -> str:
    out, at = [], 0
    for s, e in marks:
        if s < at:
            continue
        out.append(html.escape(text[at:s]) + "<mark>" + html.escape(text[s:e]) + "</mark>")
        at = e
    return "".join(out) + html.escape(text[at:])


def _answer_block(side: str, answer: str, passages: list[CitedPassage]) -> str:
    esc = html.escape
    parts = [f"<div><b>{side}</b><p class=answer>{esc(answer)}</p>"]
    for p in passages:
        where = (
            f"{esc(p['doc_id'])}, characters {p['start']}–{p['end']}"
            if p["start"] is not None
            else "not among the retrieved chunks"
        )
        parts.append(
            f"<details open><summary>[{p['n']}] {where}</summary>"
            f"<div class=passage>{_highlighted(p['text'], p['marks'])}</div></details>"
        )
    return "".join(parts) + "</div>"


def _reference_block(passage: ReferencePassage | None) -> str:
    if passage is None:
        return ""
    esc = html.escape
    return (
        f"<details open class=refpassage><summary>Where the document says it: {esc(passage['doc_id'])}, "
        f"characters {passage['start']}–{passage['end']}</summary>"
        f"<div class=passage>{_highlighted(passage['text'], passage['marks'])}</div></details>"
    )


def html_form(
    rows: list[dict[str, str]],
    passages: Mapping[str, PairPassages],
    title: str,
    n_identical: int,
) -> str:
    """The page of the pairs ``rows``: each question folds (the first is open; judging one opens
    the next), with its reference answer, the passage of the document that holds it (when
    ``passages`` gives one) and each answer with the passages it cites."""
    esc = html.escape
    items = [{c: row[c] for c in CSV_COLUMNS if c not in ("label", "complexity")} for row in rows]
    items_json = json.dumps(items, ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\!--")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:72em;margin:auto;padding:1em}"
        "fieldset{margin:1em 0;border:1px solid #bbb}.ans{display:flex;gap:1em}"
        ".ans>div{flex:1;min-width:0}.answer{white-space:pre-wrap;background:#f6f6f6;padding:.5em}"
        ".passage{position:relative;white-space:pre-wrap;font-size:90%;max-height:16em;overflow:auto;border-left:3px solid #ccc;"
        "padding:.25em .5em;color:#333}mark{background:#ffe58a}.ref{background:#eef6ee;padding:.25em .5em}"
        ".doc{color:#555;font-size:90%}label{margin-right:1em}details.item{margin:.5em 0}"
        "details.item>summary{cursor:pointer;padding:.35em;background:#f2f2f2;font-weight:bold}"
        ".state{font-weight:normal;color:#a15c00;margin-left:.5em}.state.done{color:#1d7a1d}"
        ".refpassage{margin:.25em 0 .75em}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        "<p>For each question, compare answer A and answer B against the reference answer and the "
        "passages each answer cites (the sentences it took from them are highlighted), pick a label "
        "and the question's complexity, then press <b>Download CSV</b> and send the file back. The page "
        "never sends anything; nothing is saved until you download.</p>",
        f"<p>{len(rows)} question(s), each folded under its title; judging one opens the next. "
        '<button type="button" onclick="foldAll(true)">Open all</button> '
        '<button type="button" onclick="foldAll(false)">Fold all</button></p>',
    ]
    if n_identical:
        parts.append(
            f"<p>{n_identical} question(s) where both answers are identical (the same sentences, in any order) "
            "are not shown: they count as ties (both equal) without a judgment.</p>"
        )
    parts.append('<form id="review" onsubmit="return downloadCsv(event)">')
    for i, row in enumerate(rows):
        cited_a, cited_b, reference_passage = passages[row["question_id"]]
        parts.append(f'<details class=item id="item_{i}"{" open" if i == 0 else ""}>')
        parts.append(
            f'<summary>{i + 1}. {esc(row["question"])} <span class=state id="state_{i}">to judge</span></summary>'
        )
        parts.append(f'<fieldset data-question-id="{esc(row["question_id"])}" onchange="onAnswer({i})">')
        parts.append(f"<p class=doc>Document: <b>{esc(row['doc_id'])}</b></p>")
        reference = row["reference_answer"] or "(none: the document does not answer it)"
        parts.append(f"<p class=ref>Reference answer: {esc(reference)}</p>")
        parts.append(_reference_block(reference_passage))
        parts.append(
            '<div class="ans">'
            + _answer_block("A", row["answer_A"], cited_a)
            + _answer_block("B", row["answer_B"], cited_b)
            + "</div><p>"
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
        parts.append("</select></label></p></fieldset></details>")
    parts.append('<p><button type="button" onclick="downloadCsv()">Download CSV</button> <span id="status"></span></p>')
    parts.append("</form>")
    parts.append(f"<script>\nvar ITEMS={items_json};\n{_JS % {'cols': json.dumps(list(CSV_COLUMNS))}}</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
