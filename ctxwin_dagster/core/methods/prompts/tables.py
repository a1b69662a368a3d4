"""All prompt text of ctxwin: the templates (English and German) and the notes added to them.

Nothing but text lives here: every model call ctxwin makes is rendered from one of these
tables (see :mod:`ctxwin_dagster.core.methods.prompts` for the list and what each template asks).

* :data:`TEMPLATES` — the task templates by ``(name, language)`` (those that read a whole
  document, the summary's and CC-RAG's, are written in
  :mod:`~ctxwin_dagster.core.methods.prompts.document_tables`);
* :data:`SYNTHESIZE_TEMPLATES` — the merge step of sliding-window QA, by language;
* :data:`SUMMARY_BLOCKS` — the optional summary block of ``window_answer``, by language;
* :data:`SWB_RETRY_NOTE`, :data:`WINDOW_RETRY_NOTE` — appended to a prompt retried after an
  unusable reply.

Plain Python only: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

from ctxwin_dagster.core.methods.prompts.document_tables import DOCUMENT_TEMPLATES
from ctxwin_dagster.core.methods.prompts.template import PromptTemplate

__all__ = [
    "LANGUAGES",
    "NOT_IN_DOCUMENTS",
    "NO_ANSWER",
    "QA_TEMPLATES",
    "SUMMARY_BLOCKS",
    "SWB_RETRY_NOTE",
    "SYNTHESIZE_TEMPLATES",
    "TEMPLATES",
    "WINDOW_RETRY_NOTE",
]

#: Languages with templates; anything else falls back to English.
LANGUAGES = ("en", "de")

#: What the answer prompt asks the model to reply when the passages do not hold the answer.
NOT_IN_DOCUMENTS = "NOT_IN_DOCUMENTS"

#: What the window prompt asks the model to answer when the window does not hold the answer.
NO_ANSWER = "NO_ANSWER"

_SWB_SYSTEM_EN = (
    "You situate chunks of a long document within the whole document, to improve search "
    "retrieval of the chunks. You reply with one JSON object and nothing else."
)
_SWB_SYSTEM_DE = (
    "Du ordnest Abschnitte eines langen Dokuments in das Gesamtdokument ein, um ihr Auffinden "
    "bei der Suche zu verbessern. Du antwortest mit genau einem JSON-Objekt und nichts anderem."
)
_SWB_BATCH_EN = PromptTemplate(
    "swb_batch",
    "1",
    "en",
    _SWB_SYSTEM_EN,
    "<summary>\n{summary}\n</summary>\n\n"
    "<text_before>\n{before}\n</text_before>\n\n"
    "<chunks>\n{chunks}\n</chunks>\n\n"
    "<text_after>\n{after}\n</text_after>\n\n"
    "The summary describes the whole document; text_before and text_after are the text directly "
    "before and after the chunks. For each of the {n} chunks, write a short, succinct context "
    "(one to three sentences) that situates the chunk within the overall document for the "
    "purposes of improving search retrieval of the chunk: say which part of the document it "
    "belongs to and what it is about. Reply only with a JSON object with one entry per chunk, "
    "in the order of the chunks, copying each chunk_id exactly:\n"
    '{{"contexts": [{{"chunk_id": "<chunk_id>", "context": "<context>"}}]}}',
    description="SWB-RAG: summary + window before + batch of chunks + window after → JSON contexts",
)
_SWB_BATCH_DE = PromptTemplate(
    "swb_batch",
    "1",
    "de",
    _SWB_SYSTEM_DE,
    "<summary>\n{summary}\n</summary>\n\n"
    "<text_before>\n{before}\n</text_before>\n\n"
    "<chunks>\n{chunks}\n</chunks>\n\n"
    "<text_after>\n{after}\n</text_after>\n\n"
    "Die Zusammenfassung beschreibt das ganze Dokument; text_before und text_after sind der Text "
    "unmittelbar vor und nach den Abschnitten. Schreibe für jeden der {n} Abschnitte einen kurzen, "
    "prägnanten Kontext (ein bis drei Sätze), der den Abschnitt im Gesamtdokument einordnet, um "
    "sein Auffinden bei der Suche zu verbessern: Nenne den Teil des Dokuments, zu dem er gehört, "
    "und worum es darin geht. Antworte nur mit einem JSON-Objekt mit einem Eintrag pro Abschnitt, "
    "in der Reihenfolge der Abschnitte, und übernimm jede chunk_id exakt:\n"
    '{{"contexts": [{{"chunk_id": "<chunk_id>", "context": "<Kontext>"}}]}}',
    description="SWB-RAG: Zusammenfassung + Fenster davor + Abschnitte + Fenster danach → JSON",
)

_ANSWER_EN = PromptTemplate(
    "answer",
    "1",
    "en",
    "You answer questions about documents using only the passages you are given. Each passage "
    "is labelled with its chunk id in square brackets.",
    "Passages:\n\n{passages}\n\n"
    "Question: {question}\n\n"
    "Answer the question using only the passages above. After each statement, cite the "
    "passages it comes from by their chunk ids in square brackets, e.g. [chunk_id]. If the "
    f"passages do not contain the answer, reply exactly {NOT_IN_DOCUMENTS} and nothing else.",
    description="answer from retrieved passages with [chunk_id] citations or the NOT_IN_DOCUMENTS sentinel",
)
_ANSWER_DE = PromptTemplate(
    "answer",
    "1",
    "de",
    "Du beantwortest Fragen zu Dokumenten ausschließlich anhand der vorgelegten Textstellen. "
    "Jede Textstelle ist mit ihrer Chunk-ID in eckigen Klammern gekennzeichnet.",
    "Textstellen:\n\n{passages}\n\n"
    "Frage: {question}\n\n"
    "Beantworte die Frage ausschließlich anhand der obigen Textstellen. Gib nach jeder Aussage "
    "die Textstellen, aus denen sie stammt, mit ihren Chunk-IDs in eckigen Klammern an, z. B. "
    "[chunk_id]. Wenn die Textstellen die Antwort nicht enthalten, antworte genau "
    f"{NOT_IN_DOCUMENTS} und nichts anderes.",
    description="Antwort aus Textstellen mit [chunk_id]-Belegen oder NOT_IN_DOCUMENTS",
)

_WINDOW_ANSWER_EN = PromptTemplate(
    "window_answer",
    "1",
    "en",
    "You answer questions about one window of a long document, using only that window. You "
    "reply with one JSON object and nothing else.",
    "{summary_block}"
    "Below is window {window} of {windows} of the document.\n\n"
    "<window>\n{text}\n</window>\n\n"
    "Question: {question}\n\n"
    "If the window contains the answer, answer using only the window. If it does not, the answer "
    f"is {NO_ANSWER}. Reply only with a JSON object: "
    f'{{{{"answer": "<the answer, or {NO_ANSWER}>", "confidence": <a number from 0 to 1: how sure '
    'you are that the window holds the answer>, "evidence": "<a short quote from the window, or an '
    'empty string>"}}',
    defaults={"summary_block": ""},
    description="sliding-window QA: one window → JSON answer/NO_ANSWER with confidence",
)
_WINDOW_ANSWER_DE = PromptTemplate(
    "window_answer",
    "1",
    "de",
    "Du beantwortest Fragen zu einem Fenster eines langen Dokuments ausschließlich anhand dieses "
    "Fensters. Du antwortest mit genau einem JSON-Objekt und nichts anderem.",
    "{summary_block}"
    "Es folgt Fenster {window} von {windows} des Dokuments.\n\n"
    "<window>\n{text}\n</window>\n\n"
    "Frage: {question}\n\n"
    "Wenn das Fenster die Antwort enthält, beantworte die Frage ausschließlich anhand des "
    f"Fensters. Wenn nicht, lautet die Antwort {NO_ANSWER}. Antworte nur mit einem JSON-Objekt: "
    f'{{{{"answer": "<die Antwort oder {NO_ANSWER}>", "confidence": <eine Zahl von 0 bis 1: wie '
    'sicher du bist, dass das Fenster die Antwort enthält>, "evidence": "<ein kurzes Zitat aus dem '
    'Fenster oder eine leere Zeichenkette>"}}',
    defaults={"summary_block": ""},
    description="Sliding-Window-QA: ein Fenster → JSON-Antwort/NO_ANSWER mit Konfidenz",
)

#: Every template by ``(name, language)``.
TEMPLATES: dict[tuple[str, str], PromptTemplate] = {
    (t.name, t.language): t
    for t in (
        *DOCUMENT_TEMPLATES,
        _SWB_BATCH_EN,
        _SWB_BATCH_DE,
        _ANSWER_EN,
        _ANSWER_DE,
        _WINDOW_ANSWER_EN,
        _WINDOW_ANSWER_DE,
    )
}

#: The optional ``summary_block`` of ``window_answer`` (and of ``window_synthesize``), by language.
SUMMARY_BLOCKS: dict[str, str] = {
    "en": "Summary of the whole document:\n<summary>\n{summary}\n</summary>\n\n",
    "de": "Zusammenfassung des ganzen Dokuments:\n<summary>\n{summary}\n</summary>\n\n",
}

_SYNTH_SYSTEM_EN = (
    "You combine partial answers, found in separate windows of one long document, into one "
    "faithful answer. You use only the answers and quotes you are given."
)
_SYNTH_SYSTEM_DE = (
    "Du fasst Teilantworten, die in verschiedenen Fenstern eines langen Dokuments gefunden "
    "wurden, zu einer genauen Antwort zusammen. Du verwendest nur die vorgelegten Antworten und Zitate."
)

#: The merge step of sliding-window QA (English and German). ``{answers}`` is
#: :func:`~ctxwin_dagster.core.methods.sliding_qa.format_findings` of the windows that found an answer.
SYNTHESIZE_TEMPLATES: dict[str, PromptTemplate] = {
    "en": PromptTemplate(
        "window_synthesize",
        "1",
        "en",
        _SYNTH_SYSTEM_EN,
        "{summary_block}"
        "Question: {question}\n\n"
        "Answers found in windows of the document, each labelled with its window number, the "
        "reader's confidence and a quote from the window:\n\n{answers}\n\n"
        "Write one answer to the question using only these answers. Say what they agree on once; "
        "where they differ, prefer the better-supported ones and say which windows disagree. After "
        "each statement cite the windows it comes from in square brackets, e.g. [W3] or [W3, W7]. "
        f"If none of them answers the question, reply exactly {NOT_IN_DOCUMENTS} and nothing else.",
        defaults={"summary_block": ""},
        description="sliding-window QA: merge the answers of several windows, citing [W<n>]",
    ),
    "de": PromptTemplate(
        "window_synthesize",
        "1",
        "de",
        _SYNTH_SYSTEM_DE,
        "{summary_block}"
        "Frage: {question}\n\n"
        "In Fenstern des Dokuments gefundene Antworten, jeweils mit der Nummer des Fensters, der "
        "Konfidenz des Lesers und einem Zitat aus dem Fenster:\n\n{answers}\n\n"
        "Schreibe anhand dieser Antworten eine Antwort auf die Frage. Nenne Übereinstimmendes "
        "einmal; wo sie sich widersprechen, bevorzuge die besser belegten und nenne die Fenster, die "
        "abweichen. Gib nach jeder Aussage die Fenster, aus denen sie stammt, in eckigen Klammern an, "
        "z. B. [W3] oder [W3, W7]. Wenn keine die Frage beantwortet, antworte genau "
        f"{NOT_IN_DOCUMENTS} und nichts anderes.",
        defaults={"summary_block": ""},
        description="Sliding-Window-QA: Antworten mehrerer Fenster zusammenführen, mit [W<n>]",
    ),
}

#: Appended to the SWB prompt when a batch is retried after an unusable reply.
SWB_RETRY_NOTE: dict[str, str] = {
    "en": (
        "\n\nYour previous reply to this request could not be used. Reply only with the JSON "
        "object described above, with exactly one non-empty context for each of the {n} chunk_ids."
    ),
    "de": (
        "\n\nDeine vorige Antwort auf diese Anfrage war nicht verwendbar. Antworte nur mit dem oben "
        "beschriebenen JSON-Objekt, mit genau einem nicht leeren Kontext für jede der {n} chunk_ids."
    ),
}

#: Appended to a window prompt whose first reply was not usable JSON.
WINDOW_RETRY_NOTE: dict[str, str] = {
    "en": "\n\nYour previous reply could not be used. Reply only with the JSON object described above.",
    "de": "\n\nDeine vorige Antwort war nicht verwendbar. Antworte nur mit dem oben beschriebenen JSON-Objekt.",
}

_QA_SYSTEM = (
    "You write questions that test how well a system answers questions about a document. You "
    "reply with one JSON object and nothing else, and copy quotes from the text exactly."
)

#: The prompts of question generation (``ctxwin qa generate``), English only: the model is asked
#: to write in the language of the passage. Each reply is JSON held to a schema of
#: :mod:`~ctxwin_dagster.core.methods.prompts.schemas` (``qa_*``); the quotes are copied sentences.
QA_TEMPLATES: dict[str, PromptTemplate] = {
    t.name: t
    for t in (
        PromptTemplate(
            "qa_single",
            "1",
            "en",
            _QA_SYSTEM,
            'Below is a passage from the document "{title}".\n\n<passage>\n{text}\n</passage>\n\n'
            "Write one question for a reading test about this passage. Reply with a JSON object with "
            "three fields, in this order:\n"
            '- "quote": one sentence of the passage that states a specific fact, copied exactly;\n'
            '- "answer": the short answer, copied word for word from that sentence (a name, a number, '
            "a date or a short phrase);\n"
            '- "question": a question whose answer is exactly that, clear to a reader who has not seen '
            "the passage, in your own words and in the language of the passage.",
            description="question generation: one fact of one sentence",
        ),
        PromptTemplate(
            "qa_two_passages",
            "1",
            "en",
            _QA_SYSTEM,
            'Below are two passages from far apart in the document "{title}".\n\n'
            "<passage_1>\n{text_1}\n</passage_1>\n\n<passage_2>\n{text_2}\n</passage_2>\n\n"
            "Write one question that can only be answered with a fact from each passage. Reply with "
            "a JSON object with four fields, in this order:\n"
            '- "quote_1": the sentence of passage 1 the answer needs, copied exactly;\n'
            '- "quote_2": the sentence of passage 2 the answer needs, copied exactly;\n'
            '- "answer": the short answer, taken from both sentences;\n'
            '- "question": the question, clear to a reader who has not seen the passages, in the '
            "language of the passages.",
            description="question generation: an answer that needs two passages far apart",
        ),
        PromptTemplate(
            "qa_unanswerable",
            "1",
            "en",
            _QA_SYSTEM,
            'Below is a passage from the document "{title}".\n\n<passage>\n{text}\n</passage>\n\n'
            "Write one question about the subject of this passage that sounds as if the document "
            "answered it, but that the passage does not answer: ask for a detail the passage does "
            "not give (a date, a number, a name, a reason or a condition). Reply with a JSON object "
            "with two fields, in this order:\n"
            '- "missing": the detail the passage does not give, in a few words;\n'
            '- "question": the question, in the language of the passage.',
            description="question generation: a question the document does not answer",
        ),
        PromptTemplate(
            "qa_check",
            "1",
            "en",
            "You answer questions about a document only from the excerpts you are given. You reply "
            "with one JSON object and nothing else.",
            'Excerpts of the document "{title}":\n\n{excerpts}\n\nQuestion: {question}\n\n'
            "Do the excerpts answer the question? Reply with a JSON object with two fields, in this "
            "order:\n"
            '- "quote": the sentence of the excerpts that answers it, copied exactly, or "" if none does;\n'
            f'- "answer": the answer, or {NOT_IN_DOCUMENTS} if the excerpts do not answer it.',
            description="question generation: is a question meant to be unanswerable answered after all?",
        ),
        PromptTemplate(
            "qa_closed_book",
            "1",
            "en",
            "You answer questions in a few words from what you know. You reply with one JSON object and nothing else.",
            'Question: {question}\n\nReply with a JSON object: {{"answer": "<your answer in a few words>"}}',
            description="question generation: the answer a model gives without the document",
        ),
    )
}
