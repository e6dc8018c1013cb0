"""The console's forms and query parameters, held to the API's own limits (reconciler.core.schemas):
an id as the API's path takes it, a note of at most 2,000 characters, no NUL character and no
lone surrogate in any text (PostgreSQL refuses the first, UTF-8 cannot encode the second), list
filters as the API's list queries take them. What breaks a limit is refused before the store
sees it, alike on SQLite and PostgreSQL, with a page naming the field and the limit.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from reconciler.core.schemas import Ident, Key, Note
from reconciler.runtime.wire import RunId, Token

M = TypeVar("M", bound=BaseModel)


class _Fields(BaseModel):
    # A browser sends only the form's fields; an unknown one is kept nowhere, so ignored.
    model_config = ConfigDict(extra="ignore", frozen=True)


class OperationPage(_Fields):
    id: Ident
    done: str = ""


class RunPage(_Fields):
    id: RunId


class OperationForm(_Fields):
    """A decision on an operation; `reference` is a compensation's, at the provider."""

    id: Ident
    action: str = ""
    note: Note = ""
    reference: Key | None = None


class RunForm(_Fields):
    id: RunId
    action: str = ""
    note: Note = ""
    resume_token: Token


def refused(model: type[M], data: dict[str, str]) -> M | str:
    """`data` as `model`, or what is wrong with it: each field and the limit it broke (never
    the value sent, which may be long, or hold a NUL)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        return "; ".join(f"{'.'.join(str(part) for part in error['loc']) or 'input'}: "
                         f"{error['msg']}" for error in exc.errors(include_input=False))
