"""Check an OpenAI-compatible endpoint once before a run: reachable, key accepted, model known.

One ``GET {base_url}/models`` per endpoint, no retries and short timeouts (10 s to connect, 10 s
for the reply), so a wrong URL, a rejected key, a misspelt model or a server that takes the
connection and never answers stops a command in seconds with one message, instead of every
document retrying and failing in turn. Nothing is generated, so nothing is paid.

Example::

    >>> from ctxwin_dagster.testing import FakeOpenAIServer
    >>> with FakeOpenAIServer(models=["m"]) as srv:
    ...     check_endpoint("contextualizer", "m", srv.base_url, "k").startswith("contextualizer: m @")
    ...     try:
    ...         check_endpoint("contextualizer", "other", srv.base_url, "k")
    ...     except EndpointError as exc:
    ...         print("does not know the model 'other'" in str(exc))
    True
    True
"""

from __future__ import annotations

from ctxwin_dagster.backends.calls.endpoint import normalize_base_url, redact_key, resolve_api_key
from ctxwin_dagster.backends.calls.retry import failure_reason, http_timeout
from ctxwin_dagster.backends.calls.secrets import http_client

__all__ = ["EndpointError", "check_endpoint"]


class EndpointError(RuntimeError):
    """An endpoint failed its check; the message names the role, the server and the fix."""


def check_endpoint(
    role: str,
    model: str,
    base_url: str | None,
    api_key: str | None,
    *,
    timeout_s: float = 10.0,
    connect_timeout_s: float = 10.0,
) -> str:
    """Raise :class:`EndpointError` unless the server answers, accepts the key and lists ``model``.

    Returns a short description of what was checked. A server without a model list (404 on
    ``/models``) passes with the model unchecked (said in the description). A local model
    (``local:NAME``) is served by ctxwin's own llama.cpp server (or runs in process): its file
    must be there, and no key is needed.
    The check waits at most ``connect_timeout_s`` for the connection and ``timeout_s`` for the
    reply; a timeout is named as such ("no reply within 10 s (read timeout)"), a refused
    connection as "cannot reach".
    """
    import openai

    from ctxwin_dagster.backends.chat.local_model import is_local_model, resolve_local_model

    if is_local_model(model):
        try:
            spec = resolve_local_model(model)
        except ValueError as exc:
            raise EndpointError(f"{role}: {exc}") from None
        from ctxwin_dagster.backends.chat.factory import describe_chat_model

        where = describe_chat_model(model).removeprefix(model).strip(" ()")
        return f"{role}: {model} ({spec.path.name}; {where})"

    url = normalize_base_url(base_url) if base_url else None
    where = url or "OpenAI"
    try:
        key = resolve_api_key(api_key, url, what=f"the {role} model {model!r}")
    except ValueError as exc:
        raise EndpointError(f"{role}: {exc}") from None
    client = openai.OpenAI(
        base_url=url,
        api_key=key,
        max_retries=0,
        timeout=http_timeout(timeout_s, connect_timeout_s),
        http_client=http_client(),  # error bodies come back with the key masked
    )
    try:
        listed = [m.id for m in client.models.list()]
    except openai.AuthenticationError:
        raise EndpointError(
            f"{role}: the server at {where} rejected the API key; set the right key (OPENAI_API_KEY or the resource's api_key)"
        ) from None
    except openai.PermissionDeniedError as exc:
        raise EndpointError(
            f"{role}: the server at {where} refused access ({redact_key(str(exc), key)[:200]}); check the key's permissions"
        ) from None
    except openai.NotFoundError:
        return f"{role}: {model} @ {where} reachable, key accepted (the server lists no models; the model is checked by the first call)"
    except openai.APITimeoutError as exc:
        raise EndpointError(
            f"{role}: {failure_reason(exc)} from {where} to GET /models; check that the server is serving there"
        ) from None
    except openai.APIConnectionError as exc:
        raise EndpointError(
            f"{role}: cannot reach {where} ({type(exc.__cause__ or exc).__name__}); start the server or fix --base-url"
        ) from None
    except openai.APIStatusError as exc:
        raise EndpointError(
            f"{role}: {where} answered {exc.status_code} to GET /models ({redact_key(str(exc), key)[:200]})"
        ) from None
    finally:
        client.close()
    if listed and model not in listed and not any(m.split(":")[0] == model for m in listed):
        shown = ", ".join(sorted(listed)[:10]) + (" …" if len(listed) > 10 else "")
        raise EndpointError(f"{role}: the server at {where} does not know the model {model!r}; it serves: {shown}")
    return f"{role}: {model} @ {where} ok"
