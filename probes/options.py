"""Typed reading of a probe's options table, with errors that name the option and the probe.

Factories (built-in or third-party) get options as a plain mapping, usually from TOML. Reading
them through `Options` turns a typo into an error at startup instead of a probe that silently
answers nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from probes.errors import ProbeConfigError


class Options:
    """One probe's options; every read marks the key as known, `finish()` rejects the rest."""

    def __init__(self, options: Mapping[str, Any], where: str) -> None:
        self._options = options
        self._where = where
        self._seen: set[str] = set()

    @property
    def where(self) -> str:
        return self._where

    def error(self, message: str) -> ProbeConfigError:
        return ProbeConfigError(f"{self._where}: {message}")

    def has(self, key: str) -> bool:
        return key in self._options

    def _get(self, key: str, kind: type | tuple[type, ...], label: str) -> Any:
        self._seen.add(key)
        value = self._options.get(key)
        if value is None:
            return None
        # bool is an int in Python, but a `true` where a number belongs is a mistake, not 1.
        if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            return value
        raise self.error(f"option {key!r} must be {label}")

    def string(self, key: str, default: str | None = None) -> str | None:
        value: str | None = self._get(key, str, "a string")
        return default if value is None else value

    def required_string(self, key: str) -> str:
        value = self.string(key)
        if not value:
            raise self.error(f"option {key!r} is required")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value: bool | None = self._get(key, bool, "true or false")
        return default if value is None else value

    def number(self, key: str, default: float) -> float:
        value: float | None = self._get(key, (int, float), "a number")
        if value is None:
            return default
        if value < 0:
            raise self.error(f"option {key!r} must not be negative")
        return float(value)

    def integer(self, key: str, default: int, minimum: int = 0) -> int:
        value: int | None = self._get(key, int, "an integer")
        if value is None:
            return default
        if value < minimum:
            raise self.error(f"option {key!r} must be at least {minimum}")
        return value

    def list_of_strings(self, key: str) -> list[str]:
        value: list[Any] | None = self._get(key, list, "a list of strings")
        if value is not None and not all(isinstance(v, str) for v in value):
            raise self.error(f"option {key!r} must be a list of strings")
        return list(value or [])

    def table(self, key: str, scalars: bool = False) -> dict[str, Any]:
        """A table of strings, or (`scalars`) of strings, numbers and booleans."""
        table: Mapping[str, Any] | None = self._get(key, Mapping, "a table")
        kinds = (str, int, float, bool) if scalars else (str,)
        if table is not None and not all(isinstance(v, kinds) for v in table.values()):
            label = "strings, numbers or booleans" if scalars else "strings"
            raise self.error(f"option {key!r} must map names to {label}")
        return dict(table or {})

    def sections(self, key: str) -> dict[str, Mapping[str, Any]]:
        """A table of tables (TOML `[key.NAME]`)."""
        value: Mapping[str, Any] | None = self._get(key, Mapping, "a table of tables")
        if value is not None and not all(isinstance(v, Mapping) for v in value.values()):
            raise self.error(f"each entry of {key!r} must be a table ([{key}.NAME])")
        return dict(value or {})

    def tables(self, key: str) -> list[Mapping[str, Any]]:
        """An array of tables (TOML `[[key]]`)."""
        value: list[Any] | None = self._get(key, list, "an array of tables ([[...]])")
        if value is not None and not all(isinstance(v, Mapping) for v in value):
            raise self.error(f"option {key!r} must be an array of tables ([[...]])")
        return list(value or [])

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> str:
        value = self.string(key, default)
        if value is None or value not in choices:
            raise self.error(f"option {key!r} must be one of: {', '.join(choices)}")
        return value

    def finish(self) -> None:
        """Refuse options nobody read: a misspelt option must not be silently ignored."""
        unknown = sorted(set(self._options) - self._seen)
        if unknown:
            raise self.error(f"unknown option(s): {', '.join(unknown)}")
