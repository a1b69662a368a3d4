"""The loopback OpenAI-compatible server the chat backend tests talk to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ctxwin_dagster.testing import FakeOpenAIServer


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s
