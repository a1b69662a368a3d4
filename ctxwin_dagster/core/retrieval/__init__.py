"""Retrieval: from ranked chunks to the context a model is given, with exact character offsets.

* :mod:`.settings` — :class:`~.settings.RetrievalSettings`, the one vocabulary of retrieval
  options, and the table of which option belongs to which enhancement mode;
* :mod:`.enhance` — the enhancement modes over retrieved chunks (none, neighbors, stitched
  windows, sentence focus), merged into one context within a budget;
* :mod:`.focus` — a question's focus context from the vector hits with every signal of the
  settings (hybrid candidates, question parts, lexical sentence scores, structure, adaptive budget);
* :mod:`.routing` — a question asked of a whole folder routed to the documents it most likely
  asks about (their best chunk, their name and opening, the years and quarters it names);
* :mod:`.trip` — a question's context in one trip through these modules, from an index behind
  a small search protocol (:class:`~.trip.Source`);
* :mod:`.question` — what retrieval reads of a question: its meaningful parts, the vectors that
  score sentences, and the full-text query;
* :mod:`.lexical` — BM25 over a document's chunks and sentences (``bm25s``), and hybrid fusion;
* :mod:`.statements` — the financial statements a question names, found by their titles;
* :mod:`.window` — :class:`~.window.Window`; windows around retrieved chunks (neighbours,
  "small-to-big", and stitched windows bounded by a character span) and a document's opening;
  merging windows that overlap or touch (no character twice, the best score kept) and joining them;
* :mod:`.sentence_focus` — windows of whole sentences around the sentences closest to the question.

A window's ``start``/``end`` are character offsets into its document; ``text`` is the document
text between them.
"""
