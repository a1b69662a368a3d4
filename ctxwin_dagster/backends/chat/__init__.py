"""The chat backend for OpenAI and OpenAI-compatible servers, one job per module.

* :mod:`~ctxwin_dagster.backends.chat.backend` — :class:`~.backend.OpenAIChatBackend`: bounded concurrency,
  retries, the response cache and accounting.
* :mod:`~ctxwin_dagster.backends.chat.sending` — how its requests reach the server: the SDK client
  and worker threads, one request with its retries, a batch that stops at the first failure.
* :mod:`~ctxwin_dagster.backends.chat.accounting` — the cache entry of an answer and the record of
  a call (an answer, a cache hit, a failure).
* :mod:`~ctxwin_dagster.backends.chat.messages` — checking a request, its cache key, the fit
  check, the request body and parsing the reply.
* :mod:`~ctxwin_dagster.backends.chat.errors` — :class:`~.errors.ChatBackendError` and the classifier that
  explains a failed call.
* :mod:`~ctxwin_dagster.backends.chat.structured` — which structured output (a JSON schema, JSON
  mode or nothing) each endpoint accepts, found out once per endpoint.
* :mod:`~ctxwin_dagster.backends.chat.constrained` — constrained decoding for the local model
  (llguidance): a reply with a schema can only be JSON of it.

Retries (:mod:`ctxwin_dagster.backends.calls.retry`) and the API key and base URL
(:mod:`ctxwin_dagster.backends.calls.endpoint`) are shared with the embeddings and the judge.
"""
