"""Methods: the paper's ways of giving a model a document longer than its window.

* :mod:`.swb` — SWB-RAG's batches of chunks with the text around them, and their prompts;
* :mod:`.sliding_qa` — sliding-window question answering over a whole document (the readers
  that make the model calls are in :mod:`ctxwin_dagster.backends.tasks.window_readers`); what
  a run passes around is in :mod:`.sliding_findings`, the merging of the windows' answers in
  :mod:`.sliding_merge`;
* :mod:`.sliding_windows` — overlapping windows of characters or tokens over a whole document;
* :mod:`.prompts` — every prompt text, its rendering, and the parsing of the replies.
"""
