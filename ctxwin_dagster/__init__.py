"""ctxwin: question answering over documents longer than a model's context window.

The package is built in layers; imports only point downwards (``tests/test_architecture.py``
checks it):

* ``ctxwin_dagster.core`` - plain Python, no Dagster, RAGAS or LanceDB, in rooms by job:
  ``text`` (documents, folders, charsets, sentences, splitting), ``budget`` (tokens, model
  limits, fit and truncation, the embedding window), ``retrieval`` (settings, enhancement,
  focus, lexical search, windows), ``methods`` (SWB batches, sliding-window QA, prompts) and
  ``evaluation`` (QA sets, metrics, statistics, verdict, comparison, report, review); beside
  them the paper's defaults and an experiment's settings.
* ``ctxwin_dagster.backends`` - what calls a model or a store: chat, embeddings, the task
  engines, RAGAS, the LanceDB index, what every call shares (cache, retry, endpoint) and
  planning (prices, pre-flight, the plan).
* ``ctxwin_dagster.ask`` - answering a question over an experiment's index (``ctxwin ask``);
  ``ctxwin_dagster.testing`` - the loopback servers and judges of the tests and benchmarks.
* ``ctxwin_dagster.defs`` - the Dagster assets, resources, sensors (automation included) and jobs;
  ``ctxwin_dagster.definitions`` puts them together.
* ``ctxwin_dagster.runner`` - experiment homes, and launching and following runs on an instance.
* ``ctxwin_dagster.cli`` - the ``ctxwin`` command, one module per group of subcommands.
"""

__version__ = "0.1.0"
