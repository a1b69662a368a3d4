"""RAGAS evaluation of answer records: non-LLM metrics always, the paper's five with a judge.

* :mod:`.compat` — importing ragas (with the workaround for ragas 0.4.3's broken import), the
  adapter that hands ragas a ctxwin embedder, the string similarity of the non-LLM metrics;
* :mod:`.judge` — :class:`JudgeConfig` (an OpenAI-compatible judge model), the accounting of
  its calls, and scoring records with the paper's five metrics;
* :mod:`.evaluate` — :func:`evaluate_records` and :class:`RagasEvaluation`: ctxwin's metrics,
  ragas's non-LLM metrics and the judge's, per question and summarized per variant;
* :mod:`.outcomes` — what became of each (record, metric): scored, NaN, failed or skipped, and
  the summary of a metric per variant.

Importing this package does not import ragas; the first evaluation does.
"""

from ctxwin_dagster.backends.ragas.compat import import_ragas, ragas_embeddings
from ctxwin_dagster.backends.ragas.evaluate import NON_LLM_METRICS, RagasEvaluation, aevaluate_records, evaluate_records
from ctxwin_dagster.backends.ragas.judge import JUDGE_METRICS, PAPER_METRICS, JudgeConfig

__all__ = [
    "JUDGE_METRICS",
    "NON_LLM_METRICS",
    "PAPER_METRICS",
    "JudgeConfig",
    "RagasEvaluation",
    "aevaluate_records",
    "evaluate_records",
    "import_ragas",
    "ragas_embeddings",
]
