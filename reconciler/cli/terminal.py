"""Tables for a terminal: as wide as the terminal, never wider than 100 columns.

Every table the command line prints (demo, replay, check-config, ops) is rendered here, by
rich's table layout: columns share the width, each at least as wide as its longest word when
the width allows, and a cell too long for its column wraps at spaces, or is folded within a
word only when the word is wider than the table can give it (a long path), so nothing is cut
off and no line passes the width.
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
    # rich is imported when a command prints, not for `reconciler --help`
    # (reconciler/cli/__init__.py).
    from rich.console import Console

    return Console(width=columns or width(), highlight=False, soft_wrap=False)


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None,
          max_width: int | None = None) -> str:
    """`rows` under the `columns` headings, as text no wider than `max_width` (default:
    `width()`), trailing spaces stripped; a word is broken only when the width cannot hold the
    longest words of every column side by side."""
    from rich.console import Console
    from rich.table import Table

    grid = Table(title=title, title_justify="left", box=None, pad_edge=False,
                 header_style="bold")
    fitted = column_widths(columns, rows, max_width or width())
    widths: list[int | None] = list(fitted) if fitted else [None] * len(columns)
    for name, fixed in zip(columns, widths, strict=True):
        grid.add_column(name, overflow="fold", width=fixed)
    for row in rows:
        grid.add_row(*row)
    out = Console(file=io.StringIO(), width=max_width or width(), highlight=False,
                  soft_wrap=False, color_system=None, force_terminal=False)
    out.print(grid)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.splitlines())


def column_widths(columns: Sequence[str], rows: Sequence[Sequence[str]], total: int
                  ) -> list[int] | None:
    """Widths that fit the table in `total` columns without breaking a word: the widest
    columns are narrowed first, none below its longest word (rich's own layout narrows the
    widest column even when that cuts a scenario's name). None when the table fits as it is
    or when its longest words alone do not fit: then rich's layout folds what it must."""
    cells = [[name, *(row[i] for row in rows if i < len(row))] for i, name in enumerate(columns)]
    natural = [max(len(line) for cell in column for line in cell.splitlines() or [""])
               for column in cells]
    floor = [max((len(word) for cell in column for word in cell.split()), default=0)
             for column in cells]
    room = total - 2 * (len(columns) - 1)  # a space either side of each inner column edge
    if sum(natural) <= room or sum(floor) > room:
        return None
    widths = list(natural)
    for _ in range(sum(natural) - room):
        widest = max((i for i, w in enumerate(widths) if w > floor[i]), key=widths.__getitem__)
        widths[widest] -= 1
    return widths
