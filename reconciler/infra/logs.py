"""How a `reconciler` process logs: one handler on the root logger, text or JSON lines.

    text   2026-12-01 12:00:00,123 INFO reconciler.ledger.sweep: message key=value
    json   {"time": "2026-12-01T12:00:00.123+00:00", "level": "INFO", "logger": "...",
            "message": "...", "key": "value"}            (one object per line)

Extra fields (`log.info("...", extra={...})`) are kept as fields, and a line logged while a
request is served carries its `request_id` (service.request_log). Credentials are never
written: a field whose name says token, secret, password, authorization, cookie or key is
masked, URLs logged by httpx lose their user info and query string (where an API key may
ride), and SQLAlchemy's `[parameters: ...]` section of an error (idempotency keys,
references, operators' notes) is cut from messages and tracebacks. httpx logs every request
at INFO ("HTTP Request: GET ..."): probes make many, so those lines are demoted to DEBUG and
show only with `--log-level debug`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

LogFormat = Literal["text", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")

#: LogRecord's own attributes: everything else on a record came in through `extra`.
#: `color_message` is uvicorn's ANSI-coloured copy of the message, for its own formatter only.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "color_message"}
_SECRET_NAME = re.compile(r"token|secret|password|passwd|authorization|cookie|key$", re.I)
#: Query parameters whose value is masked in a logged query string (a wider net than fields:
#: `api_key`, `sig`, an OAuth `code`, `session` may each open something).
_SECRET_PARAMETER = re.compile(
    r"token|secret|passw|auth|key|sig|code|session|cookie|credential", re.I)
#: SQLAlchemy's error text: "...\n[SQL: ...]\n[parameters: {...}]\n(Background on this error
#: at: ...)". The parameters' repr may hold brackets, so the cut runs to the next section.
_SQL_PARAMETERS = re.compile(r"\[parameters: .*?(?=\n\(Background on this error|\Z)", re.S)
HIDDEN_PARAMETERS = "[parameters hidden]"
#: The id of the request being served (service.request_log), for every line logged meanwhile.
REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)
#: Loggers whose INFO lines are per HTTP request made (httpx's "HTTP Request: ..." line).
_CHATTY = ("httpx",)
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {name: "***" if _SECRET_NAME.search(name) else value
            for name, value in vars(record).items() if name not in _STANDARD}


def without_sql_parameters(text: str) -> str:
    """`text` with SQLAlchemy's `[parameters: ...]` section cut (the engine is told to hide
    them, store.schema.make_engine; an engine made elsewhere may not be)."""
    return _SQL_PARAMETERS.sub(HIDDEN_PARAMETERS, text) if "[parameters: " in text else text


def masked_query(query: str) -> str:
    """A URL's query string with the value of each parameter whose name says it is a
    credential replaced by `***`; one that does not parse is dropped whole."""
    if not query:
        return ""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return "***"
    return urlencode([(k, "***" if _SECRET_PARAMETER.search(k) else v) for k, v in pairs],
                     safe="*")


def bare_url(url: object) -> str:
    """`url` without user info and query string (either may carry a credential)."""
    parts = urlsplit(str(url))
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: time (UTC, ISO 8601), level, logger, message, extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name,
            "message": without_sql_parameters(record.getMessage())}
        line.update(_extras(record))
        if record.exc_info:
            line["exception"] = without_sql_parameters(self.formatException(record.exc_info))
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """The classic line, with extra fields appended as key=value."""

    def __init__(self) -> None:
        super().__init__(_TEXT)

    def format(self, record: logging.LogRecord) -> str:
        extras = _extras(record)
        text = without_sql_parameters(super().format(record))
        return text + "".join(f" {k}={v}" for k, v in extras.items())


class TagRequest(logging.Filter):
    """A record logged while a request is served gets its id as the field `request_id`."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = REQUEST_ID.get()
        if request_id is not None and not hasattr(record, "request_id"):
            record.request_id = request_id
        return True


class Demote(logging.Filter):
    """httpx's per-request INFO lines become DEBUG (dropped below `threshold`), their URLs
    bare; every other record passes unchanged."""

    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".")[0] not in _CHATTY:
            return True
        if record.levelno == logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        if isinstance(record.args, tuple):
            record.args = tuple(bare_url(a) if type(a).__name__ == "URL" else a
                                for a in record.args)
        return record.levelno >= self.threshold


def configure(level: str = "info", fmt: str = "text") -> None:
    """Log at `level` in `fmt` to stderr from every logger (uvicorn's included, when it is
    given log_config=None), replacing whatever handler an earlier call installed."""
    if level not in LEVELS or fmt not in FORMATS:
        raise ValueError(f"log level one of {LEVELS}, format one of {FORMATS}")
    threshold = logging.getLevelNamesMapping()[level.upper()]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(Demote(threshold))
    handler.addFilter(TagRequest())
    handler.set_name("reconciler")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "reconciler"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(threshold)
    # Connection-level chatter below httpx (one line per TCP and TLS step) says nothing an
    # operator needs even at DEBUG; APScheduler logs a line per sweep run.
    logging.getLogger("httpcore").setLevel(max(threshold, logging.INFO))
    logging.getLogger("apscheduler").setLevel(max(threshold, logging.WARNING))
