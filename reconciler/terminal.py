"""Tables for a terminal: as wide as the terminal, never wider than 100 columns.

Every table the command line prints (demo, replay, check-config, ops) is rendered here, by
rich's table layout: columns share the width, and a cell too long for its column wraps at
spaces, or is folded within a word when it has none (an operation id, a path), so nothing is
cut off and no line passes the width.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

MAX_WIDTH = 100


def width() -> int:
    """The terminal's width, at most MAX_WIDTH (MAX_WIDTH when output is not a terminal)."""
    return min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns)


def console(columns: int | None = None) -> Console:
    """A console for plain text lines, wrapped at `columns` (default: `width()`)."""
    # rich is imported when a command prints, not for `reconciler --help` (reconciler/cli.py).
    from rich.console import Console

    return Console(width=columns or width(), highlight=False, soft_wrap=False)


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None,
          max_width: int | None = None) -> str:
    """`rows` under the `columns` headings, as text no wider than `max_width` (default:
    `width()`), trailing spaces stripped."""
    from rich.console import Console
    from rich.table import Table

    grid = Table(title=title, title_justify="left", box=None, pad_edge=False,
                 header_style="bold")
    for name in columns:
        grid.add_column(name, overflow="fold")
    for row in rows:
        grid.add_row(*row)
    out = Console(file=io.StringIO(), width=max_width or width(), highlight=False,
                  soft_wrap=False, color_system=None, force_terminal=False)
    out.print(grid)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.splitlines())
