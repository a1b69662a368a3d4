"""The model tasks of the pipeline — summarize, contextualize (CC / SWB), answer — two ways.

Three small protocols (:class:`~.results.Summarizer`, :class:`~.results.Contextualizer`,
:class:`~.results.Answerer`) and two implementations of all three, one class each:

* :mod:`~ctxwin_dagster.backends.tasks.results` — the results (:class:`~.results.SummaryResult`,
  :class:`~.results.ContextResult`, :class:`~.results.AnswerResult`) and the protocols;
* :mod:`~ctxwin_dagster.backends.tasks.llm` — :class:`~.llm.LLMTasks`, a chat model behind
  :class:`~ctxwin_dagster.backends.base.ChatBackend` (OpenAI or any OpenAI-compatible server):
  prompts fitted to the model, SWB replies parsed, repaired, retried once and, failing that,
  replaced per chunk by a single-chunk call over the batch's window, all of it counted;
* :mod:`~ctxwin_dagster.backends.tasks.extractive` — :class:`~.extractive.ExtractiveTasks`, the
  offline default: the same tasks done by *selecting sentences* with an embedding model
  (sentence index and MMR in :mod:`~ctxwin_dagster.backends.tasks.selection`). Deterministic, no
  network, cost 0, and labelled ``engine="extractive"`` everywhere.

Each class holds its engine's settings; the tasks' interface, one for both, is
:mod:`.interface`'s, and the work is in one module per task, both engines side by side with what
they share: :mod:`.summaries`, :mod:`.cc_contexts`
(CC-RAG), :mod:`.swb_contexts` (SWB-RAG) and :mod:`.answers`. What the tasks of one engine have
in common is :mod:`.llm_calls`'s (requests, waves of calls, prompts fitted to the model) or
:mod:`.extractive_work`'s (embeddings, sentence indexes, records, the memo of :mod:`.memo`). The
extractive answer rule is :mod:`.answering`'s, with the signals and models it weighs in
:mod:`.answer_signals`.

The pure text work both engines share lives in the core: sentences
(:mod:`ctxwin_dagster.core.text.sentences`), SWB segments, batches, windows and batch prompts
(:mod:`ctxwin_dagster.core.methods.swb`), prompt metering (:class:`ctxwin_dagster.core.budget.tokens.PromptMeter`)
and every prompt text (:mod:`ctxwin_dagster.core.methods.prompts`). Both engines build the SWB prompts
with the same :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`, so the extractive engine
meters exactly what the LLM engine sends, and input volumes (tokens, characters) are reported
the same way offline.

Chunks are duck-typed: anything with ``chunk_id``, ``start``, ``end``, ``text`` (and optionally
``section``) works, e.g. :class:`ctxwin_dagster.core.text.splitting.Chunk`.

A batch's call is shared by its chunks: each chunk's ``input_tokens``/``output_tokens``/
``input_chars`` are its share (the batch totals split evenly, remainders to the first chunks),
so sums over chunks equal the totals of the calls.

Example (offline)::

    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder
    from ctxwin_dagster.backends.tasks.extractive import ExtractiveTasks
    tasks = ExtractiveTasks(LocalEmbedder())
    summary = tasks.summarize(text, doc_id="ai_act", max_tokens=500)
    ctx = tasks.contextualize_swb(text, chunks, summary.text, doc_id="ai_act")
"""
