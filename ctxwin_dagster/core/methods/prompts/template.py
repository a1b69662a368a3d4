"""The prompt type: a versioned chat template rendered with ``str.format``.

Plain Python only: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["PromptTemplate"]

_FORMATTER = string.Formatter()


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """A chat prompt as two ``str.format`` templates (system and user) plus identity.

    ``system`` may be empty (then only a user message is sent). Literal braces in the
    templates are doubled (``{{`` ``}}``); values substituted into them are never parsed, so a
    document full of braces is safe. ``defaults`` gives values for optional variables.

    Example::

        >>> t = PromptTemplate("greet", "1", "en", "", "Hello {name}!")
        >>> t.render(name="Ada")
        [{'role': 'user', 'content': 'Hello Ada!'}]
        >>> t.variables
        ('name',)
    """

    name: str
    version: str
    language: str
    system: str
    user: str
    defaults: Mapping[str, object] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.version:
            raise ValueError("a PromptTemplate needs a name and a version")
        if not self.user:
            raise ValueError(f"template {self.name!r} has an empty user prompt")
        unknown = set(self.defaults) - set(self.variables)
        if unknown:
            raise ValueError(f"template {self.name!r}: defaults for unknown variables {sorted(unknown)}")

    @property
    def id(self) -> str:
        """``"<name>.<language>.v<version>"``: what results store as their prompt version."""
        return f"{self.name}.{self.language}.v{self.version}"

    @property
    def variables(self) -> tuple[str, ...]:
        """The names the templates use, in order of first appearance."""
        seen: dict[str, None] = {}
        for text in (self.system, self.user):
            for _literal, name, _spec, _conv in _FORMATTER.parse(text):
                if name is not None:
                    if not name.isidentifier():
                        raise ValueError(f"template {self.name!r}: use named fields only; got {{{name}}}")
                    seen.setdefault(name, None)
        return tuple(seen)

    def render(self, **variables: object) -> list[dict[str, str]]:
        """The chat messages with ``variables`` filled in.

        Raises:
            KeyError: a variable the template needs is missing.
            TypeError: a variable the template does not use was passed (likely a typo).
        """
        names = self.variables
        values = {**self.defaults, **variables}
        missing = [n for n in names if n not in values]
        if missing:
            raise KeyError(f"template {self.id} needs {missing}; pass them to render()")
        extra = sorted(set(variables) - set(names))
        if extra:
            raise TypeError(f"template {self.id} does not use {extra}; it takes {list(names)}")
        messages: list[dict[str, str]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system.format(**values)})
        messages.append({"role": "user", "content": self.user.format(**values)})
        return messages
