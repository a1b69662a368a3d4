"""The model endpoints the runs of a command would call (the chat models of the roles, the judge,
an OpenAI-compatible embedder), read from the code location's resources and the run config, and
checked once before any run is launched."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ctxwin_dagster.defs.versions import resource_fields

if TYPE_CHECKING:
    import dagster as dg

#: (role, model, base_url, api_key) of one endpoint.
Endpoint = tuple[str, str, str | None, str | None]


def _section(config: Mapping[str, object], key: str) -> Mapping[str, object]:
    """``config[key]`` when it is a mapping, else empty."""
    found = config.get(key)
    return found if isinstance(found, Mapping) else {}


def resource_config(defs: dg.Definitions, run_config: Mapping[str, object], key: str) -> dict[str, object]:
    """A resource's settings for these runs: the code location's defaults and the run config."""
    default = (defs.resources or {}).get(key)
    return {**resource_fields(default), **_section(_section(_section(run_config, "resources"), key), "config")}


def _api_key(value: object) -> str | None:
    """The key a resource's ``api_key`` gives: a plain string, a ``dg.EnvVar``, or ``{"env": VAR}``
    of a run config."""
    import dagster as dg

    if not value:
        return None
    if isinstance(value, Mapping) and "env" in value:
        return os.environ.get(str(value["env"]))
    if isinstance(value, dg.EnvVar):
        return value.get_value()
    return str(value)


def _text(config: Mapping[str, object], key: str) -> str:
    value = config.get(key) or ""
    return value if isinstance(value, str) else str(value)


def model_endpoints(defs: dg.Definitions, run_config: Mapping[str, object]) -> list[Endpoint]:
    """(role, model, base_url, api_key) of every model endpoint the runs would call."""
    out: list[Endpoint] = []
    for role in ("contextualizer", "answerer"):
        c = resource_config(defs, run_config, role)
        if _text(c, "model").strip():
            out.append((role, _text(c, "model"), _text(c, "base_url") or None, _api_key(c.get("api_key"))))
    judge = resource_config(defs, run_config, "judge")
    if _text(judge, "model").strip():
        key_env = _text(judge, "api_key_env") or "OPENAI_API_KEY"
        out.append(("judge", _text(judge, "model"), _text(judge, "base_url") or None, os.environ.get(key_env)))
    emb = resource_config(defs, run_config, "embeddings")
    if emb.get("provider") == "openai":
        out.append(("embeddings", _text(emb, "model"), _text(emb, "base_url") or None, _api_key(emb.get("api_key"))))
    return out


def preflight(endpoints: list[Endpoint], say: Callable[[str], None]) -> None:
    """Check each endpoint once; stop with that one error before any run."""
    from ctxwin_dagster.backends.planning.preflight import EndpointError, check_endpoint

    seen = set()
    for role, model, base_url, api_key in endpoints:
        if (model, base_url) in seen:
            continue
        seen.add((model, base_url))
        try:
            say(f"checked {check_endpoint(role, model, base_url, api_key)}")
        except EndpointError as exc:
            raise SystemExit(f"ctxwin: {exc}; nothing was run") from None
