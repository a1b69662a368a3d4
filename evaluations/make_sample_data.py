"""Regenerate the sample data in ``data/`` from the evaluation corpus.

Writes, deterministically:

* ``data/documents/``: the EU AI Act (EN), 3 SQuAD 2.0 articles and 3 CUAD contracts, one
  UTF-8 text file each, byte-identical to the corpus text so the corpus offsets stay valid;
* ``data/qa/squad_sample.jsonl``: every question of the 3 SQuAD articles;
* ``data/qa/cuad_sample.jsonl``: the answerable CUAD questions of the 3 contracts plus 10
  unanswerable ones per contract (evenly spread over the categories);
* ``data/qa/eu_ai_act_sample.jsonl``: 8 hand-written questions on the AI Act whose spans
  are located here, programmatically, inside the article named in ``meta.article``.

Every span is then checked against the written documents (read back with
``read_text_document``). Usage, from the repository root::

    .venv/bin/python evaluations/make_sample_data.py                 # ../shared/corpus
    .venv/bin/python evaluations/make_sample_data.py --corpus /path/to/corpus --out data
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from a fresh clone
    sys.path.insert(0, str(REPO_ROOT))

from ctxwin_dagster.core.evaluation.qa.corpora import cuad_to_qa, squad_to_qa  # noqa: E402
from ctxwin_dagster.core.evaluation.qa.items import QAItem, validate_spans, write_qa_jsonl  # noqa: E402
from ctxwin_dagster.core.text.documents import read_text_document  # noqa: E402

AI_ACT_FILE = "eu_ai_act_2024_1689_EN.txt"
AI_ACT_DOC_ID = "eu_ai_act_2024_1689_EN"

# SQuAD articles: moderate size (18-28 K chars), many answerable questions.
SQUAD_ARTICLES = ("Normans", "Computational_complexity_theory", "1973_oil_crisis")

# CUAD contracts: varied length (32 K, 46 K, 93 K chars), >= 23 answerable categories,
# the two longer ones with answers annotated in several pieces.
CUAD_CONTRACTS = {
    "TodosMedicalLtd_20190328_20-F_EX-4.10_11587157_EX-4.10_Marketing Agreement_ "
    "Reseller Agreement.txt": "cuad_todos_medical_reseller",
    "LegacyEducationAllianceInc_20200330_10-K_EX-10.18_12090678_EX-10.18_"
    "Development Agreement.txt": "cuad_legacy_education_development",
    "PaperexchangeComInc_20000322_S-1A_EX-10.4_5202103_EX-10.4_"
    "Co-Branding Agreement.txt": "cuad_paperexchange_cobranding",
}
CUAD_UNANSWERABLE_PER_CONTRACT = 10

# Hand-written AI Act questions. Each span is an exact passage of the text that must
# occur exactly once inside the named article; "article_5_points" takes the points
# (a)-(h) of Article 5(1).
AI_ACT_QUESTIONS: list[dict] = [
    {
        "question": "Which AI practices are prohibited by the AI Act?",
        "article": "article_5",
        "spans": "article_5_points",
        "answer": (
            "Article 5(1) prohibits placing on the market, putting into service or using AI "
            "systems that: (a) deploy subliminal, purposefully manipulative or deceptive "
            "techniques that materially distort behaviour and cause significant harm; "
            "(b) exploit vulnerabilities due to age, disability or a specific social or "
            "economic situation; (c) evaluate or classify people by social behaviour or "
            "personal characteristics (social scoring) leading to detrimental or unfavourable "
            "treatment; (d) assess the risk of a person committing a criminal offence based "
            "solely on profiling or personality traits; (e) create or expand facial "
            "recognition databases by untargeted scraping of facial images from the internet "
            "or CCTV footage; (f) infer emotions in the workplace and education institutions, "
            "except for medical or safety reasons; (g) categorise people by biometric data to "
            "infer race, political opinions, trade union membership, religious or "
            "philosophical beliefs, sex life or sexual orientation; and (h) use 'real-time' "
            "remote biometric identification in publicly accessible spaces for law "
            "enforcement, unless strictly necessary for one of the listed objectives."
        ),
    },
    {
        "question": "When does the AI Act enter into force and from when does it apply?",
        "article": "article_113",
        "spans": [
            "This Regulation shall enter into force on the twentieth day following that of "
            "its publication in the Official Journal of the European Union.",
            "It shall apply from 2 August 2026.",
            "(a) Chapters I and II shall apply from 2 February 2025;",
            "(b) Chapter III Section 4, Chapter V, Chapter VII and Chapter XII and Article 78 "
            "shall apply from 2 August 2025, with the exception of Article 101;",
            "(c) Article 6(1) and the corresponding obligations in this Regulation shall apply from 2 August 2027.",
        ],
        "answer": (
            "It enters into force on the twentieth day after its publication in the Official "
            "Journal and applies from 2 August 2026, except that Chapters I and II apply from "
            "2 February 2025; Chapter III Section 4, Chapters V, VII and XII and Article 78 "
            "from 2 August 2025 (except Article 101); and Article 6(1) with its obligations "
            "from 2 August 2027."
        ),
    },
    {
        "question": "How does the AI Act define an 'AI system'?",
        "article": "article_3",
        "spans": [
            "(1) \u2018AI system\u2019 means a machine-based system that is designed to operate "
            "with varying levels of autonomy and that may exhibit adaptiveness after "
            "deployment, and that, for explicit or implicit objectives, infers, from the input "
            "it receives, how to generate outputs such as predictions, content, "
            "recommendations, or decisions that can influence physical or virtual "
            "environments;",
        ],
        "answer": (
            "A machine-based system designed to operate with varying levels of autonomy that "
            "may exhibit adaptiveness after deployment and that, for explicit or implicit "
            "objectives, infers from the input it receives how to generate outputs such as "
            "predictions, content, recommendations or decisions that can influence physical "
            "or virtual environments."
        ),
    },
    {
        "question": "What fines apply to non-compliance with the prohibited AI practices?",
        "article": "article_99",
        "spans": [
            "3. Non-compliance with the prohibition of the AI practices referred to in "
            "Article 5 shall be subject to administrative fines of up to EUR 35 000 000 or, "
            "if the offender is an undertaking, up to 7 % of its total worldwide annual "
            "turnover for the preceding financial year, whichever is higher.",
        ],
        "answer": (
            "Administrative fines of up to EUR 35 000 000 or, if the offender is an "
            "undertaking, up to 7 % of its total worldwide annual turnover for the preceding "
            "financial year, whichever is higher."
        ),
    },
    {
        "question": ("What must providers ensure for AI systems intended to interact directly with natural persons?"),
        "article": "article_50",
        "spans": [
            "Providers shall ensure that AI systems intended to interact directly with natural "
            "persons are designed and developed in such a way that the natural persons "
            "concerned are informed that they are interacting with an AI system, unless this "
            "is obvious from the point of view of a natural person who is reasonably "
            "well-informed, observant and circumspect, taking into account the circumstances "
            "and the context of use.",
        ],
        "answer": (
            "That the systems are designed and developed so that the people concerned are "
            "informed that they are interacting with an AI system, unless this is obvious to "
            "a reasonably well-informed, observant and circumspect person given the "
            "circumstances and context of use."
        ),
    },
    {
        "question": ("By when must Member States have an AI regulatory sandbox operational at national level?"),
        "article": "article_57",
        "spans": [
            "Member States shall ensure that their competent authorities establish at least "
            "one AI regulatory sandbox at national level, which shall be operational by "
            "2 August 2026.",
        ],
        "answer": (
            "By 2 August 2026: each Member State's competent authorities must establish at "
            "least one AI regulatory sandbox at national level by then."
        ),
    },
    {
        "question": ("What does the AI Act require of providers and deployers regarding AI literacy?"),
        "article": "article_4",
        "spans": [
            "Providers and deployers of AI systems shall take measures to ensure, to their best "
            "extent, a sufficient level of AI literacy of their staff and other persons "
            "dealing with the operation and use of AI systems on their behalf, taking into "
            "account their technical knowledge, experience, education and training and the "
            "context the AI systems are to be used in, and considering the persons or groups "
            "of persons on whom the AI systems are to be used.",
        ],
        "answer": (
            "They must take measures to ensure, to their best extent, a sufficient level of AI "
            "literacy of their staff and others operating or using AI systems on their "
            "behalf, taking into account their technical knowledge, experience, education and "
            "training, the context of use and the persons the systems are used on."
        ),
    },
    {
        "question": "When is an AI system listed in Annex III not considered to be high-risk?",
        "article": "article_6",
        "spans": [
            "3. By derogation from paragraph 2, an AI system referred to in Annex III shall not "
            "be considered to be high-risk where it does not pose a significant risk of harm "
            "to the health, safety or fundamental rights of natural persons, including by not "
            "materially influencing the outcome of decision making.",
            "Notwithstanding the first subparagraph, an AI system referred to in Annex III "
            "shall always be considered to be high-risk where the AI system performs "
            "profiling of natural persons.",
        ],
        "answer": (
            "When it does not pose a significant risk of harm to the health, safety or "
            "fundamental rights of natural persons, including by not materially influencing "
            "the outcome of decision making (for example when it only performs a narrow "
            "procedural task); an Annex III system that performs profiling of natural persons "
            "is always high-risk."
        ),
    },
]


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_bytes() == data:
        return
    path.write_bytes(data)


def _locate_once(text: str, needle: str, start: int, end: int, what: str) -> tuple[int, int]:
    pos = text.find(needle, start, end)
    if pos == -1:
        raise SystemExit(f"{what}: passage not found: {needle[:80]!r}")
    if text.find(needle, pos + 1, end) != -1:
        raise SystemExit(f"{what}: passage occurs more than once: {needle[:80]!r}")
    return pos, pos + len(needle)


def ai_act_items(text: str, sections_path: Path) -> list[QAItem]:
    sections = {}
    with sections_path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                s = json.loads(line)
                sections[s["id"]] = s
    items = []
    for n, spec in enumerate(AI_ACT_QUESTIONS, start=1):
        sec = sections[spec["article"]]
        lo, hi = sec["start"], sec["end"]
        what = f"AI Act question {n} ({spec['article']})"
        if spec["spans"] == "article_5_points":
            lead = "1. The following AI practices shall be prohibited:"
            p_lo, _ = _locate_once(text, lead, lo, hi, what)
            p_hi, _ = _locate_once(text, "\n\n2. The use of", p_lo, hi, what)
            spans = [(p_lo + m.start(), p_lo + m.end()) for m in re.finditer(r"(?m)^\([a-h]\) .+$", text[p_lo:p_hi])]
            if len(spans) != 8:
                raise SystemExit(f"{what}: expected points (a)-(h), found {len(spans)}")
        else:
            spans = [_locate_once(text, needle, lo, hi, what) for needle in spec["spans"]]
        article_no = spec["article"].split("_", 1)[1]
        items.append(
            QAItem(
                question_id=f"eu_ai_act_en_q{n:02d}",
                doc_id=AI_ACT_DOC_ID,
                question=spec["question"],
                reference_answer=spec["answer"],
                reference_spans=tuple(spans),
                is_impossible=False,
                meta={
                    "source": "hand-written",
                    "article": spec["article"],
                    "article_title": f"Article {article_no}: {sec['title'].rstrip('`')}",
                },
            )
        )
    return items


def select_cuad(items: list[QAItem]) -> list[QAItem]:
    """Answerable questions plus N unanswerable ones per contract, evenly spread."""
    out: list[QAItem] = []
    for doc_id in CUAD_CONTRACTS.values():
        mine = [q for q in items if q.doc_id == doc_id]
        unanswerable = [q for q in mine if q.is_impossible]
        k = min(CUAD_UNANSWERABLE_PER_CONTRACT, len(unanswerable))
        keep_ids = {unanswerable[(i * len(unanswerable)) // k].question_id for i in range(k)}
        out.extend(q for q in mine if not q.is_impossible or q.question_id in keep_ids)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus",
        type=Path,
        default=REPO_ROOT.parent / "shared" / "corpus",
        help="corpus folder (default: ../shared/corpus relative to the repository root)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "data", help="output folder (default: data/)")
    args = parser.parse_args(argv)
    corpus: Path = args.corpus
    if not (corpus / "README.md").is_file():
        parser.error(f"corpus not found at {corpus}; pass --corpus PATH")
    docs_dir = args.out / "documents"
    qa_dir = args.out / "qa"

    # -- documents ------------------------------------------------------------------
    written: list[Path] = []
    src = corpus / "eu_ai_act" / AI_ACT_FILE
    _write_bytes(docs_dir / AI_ACT_FILE, src.read_bytes())
    written.append(docs_dir / AI_ACT_FILE)

    squad_docs = {}
    squad_docs_path = corpus / "squad_v2_dev_half" / "squad_v2_dev_half_docs.jsonl"
    with squad_docs_path.open(encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            squad_docs[d["doc_id"]] = d
    for name in SQUAD_ARTICLES:
        path = docs_dir / f"squad_{name}.txt"
        _write_bytes(path, squad_docs[name]["text"].encode("utf-8"))
        written.append(path)

    for contract, doc_id in CUAD_CONTRACTS.items():
        path = docs_dir / f"{doc_id}.txt"
        _write_bytes(path, (corpus / "cuad_dev" / "contracts" / contract).read_bytes())
        written.append(path)

    documents = {p.stem: read_text_document(p) for p in written}
    texts = {doc_id: d.text for doc_id, d in documents.items()}

    # -- QA sets --------------------------------------------------------------------
    squad = squad_to_qa(
        corpus / "squad_v2_dev_half" / "squad_v2_dev_half_questions.jsonl",
        doc_ids=SQUAD_ARTICLES,
    )
    cuad = select_cuad(
        cuad_to_qa(
            corpus / "cuad_dev" / "questions.jsonl",
            contracts=CUAD_CONTRACTS,
            doc_id_for=CUAD_CONTRACTS.__getitem__,
        )
    )
    ai_act = ai_act_items(texts[AI_ACT_DOC_ID], corpus / "eu_ai_act" / "eu_ai_act_sections_EN.jsonl")

    for items in (squad, cuad, ai_act):
        validate_spans(items, texts)
    for q in squad:  # SQuAD offsets are exact: every span's slice is its answer text
        answers = q.meta.get("answer_texts", [])
        for (s, e), answer in zip(q.reference_spans, answers, strict=True):
            if texts[q.doc_id][s:e] != answer:
                raise SystemExit(f"SQuAD {q.question_id}: slice {s}:{e} != {answer!r}")

    outputs = {
        "squad_sample.jsonl": squad,
        "cuad_sample.jsonl": cuad,
        "eu_ai_act_sample.jsonl": ai_act,
    }
    for name, items in outputs.items():
        write_qa_jsonl(items, qa_dir / name)

    # -- summary --------------------------------------------------------------------
    all_items = squad + cuad + ai_act
    print(f"{'document':40} {'chars':>8} {'bytes':>8} {'questions':>9} {'answerable':>10}")
    for doc_id, doc in documents.items():
        qs = [q for q in all_items if q.doc_id == doc_id]
        size = Path(doc.source_path).stat().st_size
        answerable = sum(not q.is_impossible for q in qs)
        print(f"{doc_id:40} {doc.n_chars:8,} {size:8,} {len(qs):9} {answerable:10}")
    for name, items in outputs.items():
        size = (qa_dir / name).stat().st_size
        answerable = sum(not q.is_impossible for q in items)
        print(f"{name:40} {size:8,} bytes, {len(items)} questions, {answerable} answerable")
    total = sum(p.stat().st_size for p in written) + sum((qa_dir / n).stat().st_size for n in outputs)
    print(f"total {total:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
