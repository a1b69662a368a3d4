"""Versioned prompt templates (English and German) and the parsers for their answers.

Every model call ctxwin makes is rendered from a :class:`PromptTemplate`. A template has a
``name``, a ``version`` and a ``language``; its :attr:`PromptTemplate.id`
(``"swb_batch.en.v1"``) is stored with every result, so a changed prompt is visible in the data
and never answered from a cache filled by the old one.

Templates (see :data:`TEMPLATES`), each in English and German:

``summarize_segment``  one part (≤ 1,000,000 characters) of a long document → a summary of at
                       most ``max_tokens`` tokens (the map step of the global summary);
``summarize_overview`` the segment summaries → one overview of at most ``max_tokens`` tokens
                       (the reduce step);
``cc_context``         contextual retrieval (CC-RAG): the whole document, then one chunk → a
                       short context situating the chunk (the document comes first, so
                       providers' prompt caching can reuse it across the chunks);
``swb_batch``          SWB-RAG: the global summary, the text before, a numbered batch of chunks
                       with their ids and the text after → ``{"contexts": [{"chunk_id", "context"}]}``;
``answer``             passages labelled with their chunk ids and a question → an answer citing
                       chunk ids in square brackets, or exactly :data:`NOT_IN_DOCUMENTS`;
``window_answer``      one window of a long document and a question → JSON
                       ``{"answer", "confidence", "evidence"}`` with ``answer`` = :data:`NO_ANSWER`
                       when the window does not hold it.

Also :data:`SYNTHESIZE_TEMPLATES` (``window_synthesize``: the answers of several windows →
one answer citing ``[W<n>]``), and the notes appended to a retried prompt,
:data:`SWB_RETRY_NOTE` and :data:`WINDOW_RETRY_NOTE`.

Pick one with :func:`get_template` (English fallback when a language has no template), and the
language of a document with :func:`detect_language`.

The package keeps all prompt text in one module and the code around it in others:

* :mod:`~ctxwin_dagster.core.methods.prompts.tables` — every template and note (text only; the
  templates that read a whole document are in :mod:`~ctxwin_dagster.core.methods.prompts.document_tables`);
* :mod:`~ctxwin_dagster.core.methods.prompts.template` — :class:`PromptTemplate` (rendering);
* :mod:`~ctxwin_dagster.core.methods.prompts.render` — :func:`get_template` and the formatting of
  template values (passages, chunk batches, summaries);
* :mod:`~ctxwin_dagster.core.methods.prompts.language` — :func:`detect_language`;
* :mod:`~ctxwin_dagster.core.methods.prompts.parsing` — the parsers of model replies.

Import from the package (``from ctxwin_dagster.core.methods.prompts import get_template``).

Plain Python only: no Dagster, RAGAS or LanceDB.

Example::

    >>> t = get_template("answer", "de")
    >>> t.id
    'answer.de.v1'
    >>> msgs = t.render(question="Was ist verboten?", passages=format_passages([("c1", "Text.")]))
    >>> [m["role"] for m in msgs]
    ['system', 'user']
    >>> parse_answer("Social scoring is banned [c1].", ["c1", "c2"]).cited_chunk_ids
    ('c1',)
"""

from ctxwin_dagster.core.methods.prompts.language import detect_language
from ctxwin_dagster.core.methods.prompts.parsing import (
    ParsedAnswer,
    PromptOutputError,
    WindowAnswer,
    extract_json,
    parse_answer,
    parse_swb_contexts,
    parse_window_answer,
)
from ctxwin_dagster.core.methods.prompts.render import (
    format_chunk_batch,
    format_passages,
    format_summaries,
    get_template,
    summary_block,
)
from ctxwin_dagster.core.methods.prompts.tables import (
    LANGUAGES,
    NO_ANSWER,
    NOT_IN_DOCUMENTS,
    SWB_RETRY_NOTE,
    SYNTHESIZE_TEMPLATES,
    TEMPLATES,
    WINDOW_RETRY_NOTE,
)
from ctxwin_dagster.core.methods.prompts.template import PromptTemplate

__all__ = [
    "LANGUAGES",
    "NOT_IN_DOCUMENTS",
    "NO_ANSWER",
    "SWB_RETRY_NOTE",
    "SYNTHESIZE_TEMPLATES",
    "TEMPLATES",
    "WINDOW_RETRY_NOTE",
    "ParsedAnswer",
    "PromptOutputError",
    "PromptTemplate",
    "WindowAnswer",
    "detect_language",
    "extract_json",
    "format_chunk_batch",
    "format_passages",
    "format_summaries",
    "get_template",
    "parse_answer",
    "parse_swb_contexts",
    "parse_window_answer",
    "summary_block",
]
