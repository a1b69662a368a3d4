"""Text: reading documents and cutting them, with exact character offsets.

* :mod:`.documents` — one document file read as text (PDF, HTML, Markdown, plain text), with a
  clear error naming the file and the fix;
* :mod:`.file_names` — what a file's name tells: whether it is read as a document, and its id;
* :mod:`.folder` — a documents folder: which files are documents, their ids and their registry;
* :mod:`.charsets` — the character set of a text file (not the tokenizer's encodings);
* :mod:`.sentences` — sentence spans of a text;
* :mod:`.splitting` — chunks with exact offsets (the recursive character splitter of the paper),
  its steps on offsets in :mod:`.pieces`;
* :mod:`.sections` — the headings of a text and the heading path at an offset.
"""
