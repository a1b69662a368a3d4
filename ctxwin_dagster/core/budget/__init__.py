"""Budget: what fits a model's window, counted with the model's own tokenizer.

* :mod:`.tokens` — token counters and prompt metering;
* :mod:`.limits` — model context windows and output limits (a registry, with prices offline);
* :mod:`.fit` — fit checks and the truncation strategies (nothing is cut silently);
* :mod:`.embedding_window` — the embedding model's window, and the chunks that overflow it.
"""
