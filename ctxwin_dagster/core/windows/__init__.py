"""Windows over documents, with exact character offsets.

Four ways to make the blocks of text a model sees, one job per module:

* :mod:`~ctxwin_dagster.core.windows.sliding` — :func:`~.sliding.sliding_windows`: cut a whole
  document into overlapping windows of ``size`` characters or tokens (stride = size − overlap),
  for documents longer than a model's context;
* :mod:`~ctxwin_dagster.core.windows.around_hits` — windows around retrieved chunks:
  :func:`~.around_hits.neighbor_windows` ("small-to-big" enrichment: each retrieved chunk grows
  by ``num_neighbors`` chunks on each side, bounded by its document's ends) and
  :func:`~.around_hits.stitch_windows` (each retrieved chunk grows by adjacent chunks while the
  window's character span stays within ``context_window_size``), with
  :func:`~.around_hits.span_text` rebuilding a span's text from chunks;
* :mod:`~ctxwin_dagster.core.windows.window` — :class:`~.window.Window` itself, and
  :func:`~.window.merge_windows`: per document, windows that overlap or touch become one (no
  character twice), keeping the best score; :func:`~.window.join_windows` joins the blocks
  with a blank line.

A window's ``start``/``end`` are character offsets into its document; ``text`` is the document
text between them.
"""
