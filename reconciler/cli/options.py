"""What several commands share: the logging options, the exit codes."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

#: Exit codes: 0 all good, 1 an expectation failed (with --check), 2 the input is bad.
EXIT_FAILED, EXIT_BAD_INPUT = 1, 2


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormat(StrEnum):
    text = "text"
    json = "json"


LogLevelOption = Annotated[LogLevel | None, typer.Option(
    help="debug, info, warning or error; debug also shows every probe HTTP call [default "
         "info; env RECONCILER_LOG_LEVEL for serve].", case_sensitive=False)]
LogFormatOption = Annotated[LogFormat | None, typer.Option(
    help="text, or json: one object per line (time, level, logger, message, extra fields) "
         "[default text; env RECONCILER_LOG_FORMAT for serve].", case_sensitive=False)]
