"""Test support: stand-ins for the network services ctxwin talks to, all on 127.0.0.1.

For tests, benchmarks and offline demos; the pipeline itself (``core``, ``models``, ``defs``,
the CLI) never imports this package.

* :mod:`.server` — :class:`FakeOpenAIServer`, a loopback OpenAI-compatible HTTP server (chat
  completions, embeddings, models) with fault injection (:mod:`.faults`, :data:`FAULTS`);
* :mod:`.replies` — what that server answers: its deterministic :func:`default_responder` and
  :func:`fake_embedding`;
* :mod:`.chat` — :func:`~.chat.loopback_chat`, a chat backend on that server with short backoffs,
  and :func:`~.chat.chat_request`;
* :mod:`.lexical_judge` — :func:`lexical_judge_responder`, a responder for that server that
  answers RAGAS's judge prompts by word overlap, so ragas's real judge path runs offline;
* :mod:`.webserver` — :func:`~.webserver.dagster_webserver`, the real Dagster webserver started on
  a free loopback port (and stopped), and :func:`~.webserver.graphql` to ask it.
"""

from ctxwin_dagster.testing.faults import FAULTS
from ctxwin_dagster.testing.lexical_judge import lexical_judge_responder
from ctxwin_dagster.testing.replies import default_responder, fake_embedding
from ctxwin_dagster.testing.server import FakeOpenAIServer

__all__ = ["FAULTS", "FakeOpenAIServer", "default_responder", "fake_embedding", "lexical_judge_responder"]
