"""Questions generated from the documents: the ``generated_questions`` asset."""
