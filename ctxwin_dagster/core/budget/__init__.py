"""Budget: what fits a model's window, counted with the model's own tokenizer.

* :mod:`.tokens` — token counters and prompt metering;
* :mod:`.limits` — model context windows and output limits (a registry, with prices offline);
* :mod:`.fit` — fit checks and the truncation strategies (nothing is cut silently), the
  messages each strategy keeps in :mod:`.strategies`;
* :mod:`.embedding_window` — the embedding model's window, and texts cut into pieces that fit it;
* :mod:`.embedding_rows` — what an index row (a chunk and its context) embeds, and what did not fit.
"""
