"""QA sets: questions with reference answers and reference spans, in one JSONL format.

One job per module:

* :mod:`~ctxwin_dagster.core.evaluation.qa.items` — the format: :class:`~.items.QAItem` and its
  validation, reading and writing QA JSONL files (:func:`~.items.load_qa_jsonl`,
  :func:`~.items.load_qa_folder`, :func:`~.items.write_qa_jsonl`), and checking the spans
  against the documents (:func:`~.items.validate_spans`);
* :mod:`~ctxwin_dagster.core.evaluation.qa.resolve` — which document each question names (doc_id, file
  name or stem; :func:`~.resolve.resolve_questions`), and whether its reference spans lie
  inside that document's text (:func:`~.resolve.check_reference_spans`, naming the file and line);
* :mod:`~ctxwin_dagster.core.evaluation.qa.corpora` — importers of the corpus files: SQuAD 2.0
  (:func:`~.corpora.squad_to_qa`) and CUAD (:func:`~.corpora.cuad_to_qa`);
* :mod:`~ctxwin_dagster.core.evaluation.qa.generation` — questions generated from a document
  and the checks each must pass (the text matching they use is in
  :mod:`~ctxwin_dagster.core.evaluation.qa.text_match`).

Plain Python only: this package imports neither dagster, ragas nor lancedb.
"""
