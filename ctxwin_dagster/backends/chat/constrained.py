"""Constrained decoding for the local model: each reply that has a JSON schema can only be JSON
that matches it.

At every generated token, llguidance computes which tokens of the vocabulary keep the reply
inside the schema's grammar, and the others get ``-inf`` logits before the model picks one. A
reply that ends (EOS) is then complete JSON of the schema, and a reply cut at ``max_tokens`` is
the only way left to fail (the schemas bound their strings for that reason).

llguidance (guidance-ai, MIT; the structured-output engine of llama.cpp, vLLM and SGLang) was
chosen over xgrammar, outlines and lm-format-enforcer: it is one 3 MB wheel with no dependencies
(xgrammar pulls triton, outlines a second generation stack), it covers JSON Schema fully
(``prefixItems``, ``const``, ``maxLength``), and a mask costs microseconds, far below one step
of even a 135M model on a CPU.

Example::

    proc = SchemaLogitsProcessor.for_rows(tokenizer, [schema_or_none, ...], prompt_width=width)
    model.generate(input_ids=..., logits_processor=[proc], ...)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from llguidance import LLMatcher, LLTokenizer
    from transformers import PreTrainedTokenizerBase

__all__ = ["GENERIC_OBJECT", "SchemaLogitsProcessor", "grammar_of"]

#: The grammar of a JSON-mode request without a schema: any JSON object.
GENERIC_OBJECT: Mapping[str, object] = {"type": "object"}

_TOKENIZERS: dict[int, LLTokenizer] = {}
_GRAMMARS: dict[str, str] = {}
_LOCK = threading.Lock()


def _ll_tokenizer(tokenizer: PreTrainedTokenizerBase) -> LLTokenizer:
    """llguidance's view of a transformers tokenizer (built once per tokenizer: about a second)."""
    import llguidance.hf
    from transformers import PreTrainedTokenizerFast

    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        raise TypeError(f"constrained decoding reads a fast tokenizer; got a {type(tokenizer).__name__}")
    with _LOCK:
        found = _TOKENIZERS.get(id(tokenizer))
        if found is None:
            found = _TOKENIZERS[id(tokenizer)] = llguidance.hf.from_tokenizer(tokenizer)
        return found


def grammar_of(schema: Mapping[str, object]) -> str:
    """The llguidance grammar of a JSON schema, compact JSON without free whitespace.

    Raises:
        ValueError: llguidance cannot compile the schema (the message says why).
    """
    import llguidance

    key = json.dumps(schema, sort_keys=True)
    with _LOCK:
        found = _GRAMMARS.get(key)
    if found is not None:
        return found
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        dict(schema), defaults={"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
    )
    problem = llguidance.LLMatcher.validate_grammar(grammar)  # empty when the grammar is sound
    if problem:
        raise ValueError(f"the reply schema cannot be decoded under: {problem}")
    with _LOCK:
        _GRAMMARS[key] = grammar
    return grammar


class SchemaLogitsProcessor:
    """A transformers logits processor holding each row of a batch to its own schema (or to
    nothing, for a row without one).

    Args:
        tokenizer: llguidance's tokenizer (:meth:`for_rows` makes it from the transformers one).
        grammars: per row, a grammar from :func:`grammar_of`, or None (the row is not constrained).
        prompt_width: the (left-padded) prompt's length: tokens after it are the reply's.
    """

    def __init__(self, tokenizer: LLTokenizer, grammars: Sequence[str | None], *, prompt_width: int) -> None:
        import llguidance
        import llguidance.torch

        self._lt = llguidance.torch
        self.matchers: list[LLMatcher | None] = [
            None if g is None else llguidance.LLMatcher(tokenizer, g) for g in grammars
        ]
        self.prompt_width = prompt_width
        self.vocab_size = tokenizer.vocab_size
        self.mask = llguidance.torch.allocate_token_bitmask(len(grammars), tokenizer.vocab_size)

    @classmethod
    def for_rows(
        cls, tokenizer: PreTrainedTokenizerBase, schemas: Sequence[Mapping[str, object] | None], *, prompt_width: int
    ) -> SchemaLogitsProcessor:
        """A processor for a batch whose rows have these schemas (None: unconstrained)."""
        return cls(
            _ll_tokenizer(tokenizer),
            [None if s is None else grammar_of(s) for s in schemas],
            prompt_width=prompt_width,
        )

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[1] > self.prompt_width:  # the token picked last step joins its row's reply
            for row, m in enumerate(self.matchers):
                if m is None or m.is_stopped() or m.is_error():
                    continue
                m.consume_token(int(input_ids[row, -1]))  # the mask allowed it; an error stops the row's mask
        self.mask.fill_(-1)  # every token allowed, then each constrained row narrowed
        for row, m in enumerate(self.matchers):
            if m is not None and not m.is_error():
                self._lt.fill_next_token_bitmask(m, self.mask, row)
        width = scores.shape[-1]
        if width > self.vocab_size:  # the model's embedding matrix may be padded past the vocabulary
            scores[:, self.vocab_size :] = float("-inf")
            self._lt.apply_token_bitmask_inplace(scores[:, : self.vocab_size], self.mask)
        else:
            self._lt.apply_token_bitmask_inplace(scores, self.mask)
        return scores
