"""Evaluation: question sets, scores, statistics and the comparison report.

* :mod:`.qa` — the QA format and its files, and the SQuAD, CUAD and table importers;
* :mod:`.metrics` — answer text, per-question scoring and aggregation;
* :mod:`.stats` — the paper's paired tests and confidence intervals (:mod:`.paired`: the test of
  one pair of variants);
* :mod:`.verdict` — the report's verdict from those tests;
* :mod:`.comparison` — an experiment's comparison of the variants, as report files;
* :mod:`.report` — the report's Markdown and HTML (:mod:`.report_tables`: its tables,
  :mod:`.report_plots`: its plots);
* :mod:`.review` — human review: blinded answer pairs and the paper's Table 4 (the passages
  shown are in :mod:`.review_passages`, the reading of a filled review in :mod:`.review_reading`);
* :mod:`.review_form` — the static HTML form a reviewer fills in;
* :mod:`.record_values` — the values of JSON records, read with their types checked.
"""
