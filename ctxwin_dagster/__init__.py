"""ctxwin: question answering over documents longer than a model's context window.

The package has three layers (imports only point downwards):

* ``ctxwin_dagster.core`` - plain Python: tokens, model limits, fit and truncation,
  splitting, windows, prompts, contextualization, retrieval, answering, metrics.
* ``ctxwin_dagster.models`` - model backends (chat, embeddings, the extractive engine).
* ``ctxwin_dagster.defs`` - the Dagster assets, resources, sensors (automation included) and jobs.
"""

__version__ = "0.1.0"
