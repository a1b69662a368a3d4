"""Evaluation: question sets, scores, statistics and the comparison report.

* :mod:`.qa` — the QA format and its files, and the SQuAD, CUAD and table importers;
* :mod:`.metrics` — answer text, per-question scoring and aggregation;
* :mod:`.stats` — the paper's paired tests and confidence intervals;
* :mod:`.verdict` — the report's verdict from those tests;
* :mod:`.comparison` — an experiment's comparison of the variants, as report files;
* :mod:`.report` — the report's Markdown and plots;
* :mod:`.review` — human review: blinded answer pairs and the paper's Table 4.
* :mod:`.review_form` — the static HTML form a reviewer fills in.
"""
