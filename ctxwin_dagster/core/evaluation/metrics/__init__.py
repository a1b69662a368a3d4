"""Metrics of answer records: per question, and aggregated per variant.

An answer record is a plain dict as the asking engine writes it (the format is described in
:mod:`~ctxwin_dagster.core.evaluation.metrics.scoring`). One job per module:

* :mod:`~ctxwin_dagster.core.evaluation.metrics.answers` — SQuAD's answer metrics on text:
  :func:`~.answers.normalize_answer`, :func:`~.answers.exact_match`, :func:`~.answers.answer_f1`;
* :mod:`~ctxwin_dagster.core.evaluation.metrics.records` — a record's checks
  (:class:`~.records.RecordError`), its context spans, whether it is answerable, its numbers;
* :mod:`~ctxwin_dagster.core.evaluation.metrics.scoring` — the metrics of one record (span hit,
  span-character recall, hit@k, MRR, ID-based context precision and recall, answer F1, exact
  match, abstention): :func:`~.scoring.score_record`, :func:`~.scoring.score_answers`, and the
  record's reference spans and reference chunks;
* :mod:`~ctxwin_dagster.core.evaluation.metrics.aggregation` — means with bootstrap confidence intervals
  per variant (:func:`~.aggregation.aggregate`), efficiency totals
  (:func:`~.aggregation.aggregate_efficiency`) and the per-question table the statistics read
  (:func:`~.aggregation.scores_by_variant`).

Plain Python (numpy only): no dagster, ragas or lancedb.
"""
