"""The prompts that read a whole document rather than answer a question: the global summary's
map step (``summarize_segment``) and reduce step (``summarize_overview``), and CC-RAG's
situating context of a chunk (``cc_context``), in English and German.

Text only; :data:`~ctxwin_dagster.core.methods.prompts.tables.TEMPLATES` lists them with the
others.
"""

from __future__ import annotations

from ctxwin_dagster.core.methods.prompts.template import PromptTemplate

__all__ = ["DOCUMENT_TEMPLATES"]

_SUMMARY_SYSTEM_EN = (
    "You write faithful, dense summaries of long documents. You use only information from the "
    "text you are given and keep the names of its parts (chapters, sections, articles, annexes)."
)
_SUMMARY_SYSTEM_DE = (
    "Du schreibst genaue, dichte Zusammenfassungen langer Dokumente. Du verwendest nur "
    "Informationen aus dem vorgelegten Text und behältst die Namen seiner Teile (Kapitel, "
    "Abschnitte, Artikel, Anhänge) bei."
)

_SUMMARIZE_SEGMENT_EN = PromptTemplate(
    "summarize_segment",
    "1",
    "en",
    _SUMMARY_SYSTEM_EN,
    "Below is part {part} of {parts} of a long document.\n\n"
    "<segment>\n{text}\n</segment>\n\n"
    "Summarize this part in at most {max_tokens} tokens. Cover what it is about and how it is "
    "organised, and its main definitions, rules, obligations, rights, actors, procedures, "
    "deadlines, figures and exceptions, naming the chapters, sections or articles they are in. "
    "Write plain prose in English and add nothing that is not in the text.",
    description="map step of the global summary: one segment of ≤1,000,000 characters",
)
_SUMMARIZE_SEGMENT_DE = PromptTemplate(
    "summarize_segment",
    "1",
    "de",
    _SUMMARY_SYSTEM_DE,
    "Es folgt Teil {part} von {parts} eines langen Dokuments.\n\n"
    "<segment>\n{text}\n</segment>\n\n"
    "Fasse diesen Teil in höchstens {max_tokens} Tokens zusammen. Beschreibe, worum es geht und "
    "wie er aufgebaut ist, sowie die wichtigsten Begriffsbestimmungen, Regeln, Pflichten, Rechte, "
    "Beteiligten, Verfahren, Fristen, Zahlen und Ausnahmen, jeweils mit den Kapiteln, Abschnitten "
    "oder Artikeln, in denen sie stehen. Schreibe Fließtext auf Deutsch und füge nichts hinzu, "
    "was nicht im Text steht.",
    description="Map-Schritt der globalen Zusammenfassung: ein Segment von ≤1.000.000 Zeichen",
)

_SUMMARIZE_OVERVIEW_EN = PromptTemplate(
    "summarize_overview",
    "1",
    "en",
    _SUMMARY_SYSTEM_EN,
    "Below are summaries of the {parts} consecutive parts of one long document, in order.\n\n"
    "{summaries}\n\n"
    "Combine them into one overview of the whole document in at most {max_tokens} tokens: its "
    "purpose and scope, its structure, and the key definitions, rules, obligations, actors, "
    "procedures and exceptions, naming the parts they are in. Remove repetition, keep the "
    "document's order, write plain prose in English and add nothing that is not in the summaries.",
    description="reduce step of the global summary: segment summaries → overview of ≤N tokens",
)
_SUMMARIZE_OVERVIEW_DE = PromptTemplate(
    "summarize_overview",
    "1",
    "de",
    _SUMMARY_SYSTEM_DE,
    "Es folgen Zusammenfassungen der {parts} aufeinanderfolgenden Teile eines langen Dokuments, "
    "in ihrer Reihenfolge.\n\n"
    "{summaries}\n\n"
    "Fasse sie zu einem Überblick über das ganze Dokument in höchstens {max_tokens} Tokens "
    "zusammen: Zweck und Anwendungsbereich, Aufbau sowie die wichtigsten Begriffsbestimmungen, "
    "Regeln, Pflichten, Beteiligten, Verfahren und Ausnahmen, jeweils mit den Teilen, in denen sie "
    "stehen. Vermeide Wiederholungen, behalte die Reihenfolge des Dokuments bei, schreibe "
    "Fließtext auf Deutsch und füge nichts hinzu, was nicht in den Zusammenfassungen steht.",
    description="Reduce-Schritt der globalen Zusammenfassung",
)

# Anthropic's contextual-retrieval prompt form, in our own words. The document comes first in
# the only message, so the prompt prefix is identical for every chunk of a document.
_CC_CONTEXT_EN = PromptTemplate(
    "cc_context",
    "1",
    "en",
    "",
    "<document>\n{document}\n</document>\n\n"
    "Here is a chunk from the document above that we want to place within the whole document:\n"
    "<chunk>\n{chunk}\n</chunk>\n\n"
    "Write a short, succinct context that situates this chunk within the overall document, "
    "to improve search retrieval of the chunk. Answer only with the succinct context and "
    "nothing else.",
    description="CC-RAG: whole document + one chunk → situating context (Anthropic's form)",
)
_CC_CONTEXT_DE = PromptTemplate(
    "cc_context",
    "1",
    "de",
    "",
    "<document>\n{document}\n</document>\n\n"
    "Hier ist ein Abschnitt aus dem obigen Dokument, den wir im Gesamtdokument einordnen "
    "möchten:\n"
    "<chunk>\n{chunk}\n</chunk>\n\n"
    "Schreibe einen kurzen, prägnanten Kontext, der diesen Abschnitt im Gesamtdokument einordnet, "
    "um das Auffinden des Abschnitts bei der Suche zu verbessern. Antworte nur mit dem kurzen "
    "Kontext und nichts anderem.",
    description="CC-RAG: ganzes Dokument + ein Abschnitt → einordnender Kontext",
)

#: The templates of this module.
DOCUMENT_TEMPLATES: tuple[PromptTemplate, ...] = (
    _SUMMARIZE_SEGMENT_EN,
    _SUMMARIZE_SEGMENT_DE,
    _SUMMARIZE_OVERVIEW_EN,
    _SUMMARIZE_OVERVIEW_DE,
    _CC_CONTEXT_EN,
    _CC_CONTEXT_DE,
)
