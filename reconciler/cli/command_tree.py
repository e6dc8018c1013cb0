"""The command line's tree, as typer builds it, with two changes (the CLI's `__init__` uses it):

- Groups loaded when used: the root's `LAZY` groups are imported when one of their commands
  runs or their own help is shown, so that `reconciler --help` does not import what they need
  (`ops` speaks HTTP); the root's help lists them with the help `LAZY` gives.
- Arguments shown as click shows them: `PATHS...` and `[UPSTREAM]...` in the usage line and in
  the list of arguments, where typer 0.29 writes `{paths}...` and `paths... <list[Path]>`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

if TYPE_CHECKING:
    from typer._click import Command, Context, HelpFormatter


class Argument(TyperArgument):
    """An argument by its metavar (default: its name in capitals), bracketed when optional,
    `...` when it takes several; no type beside it: the help says what it is."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar or (self.name or "").upper()

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")

    def _rich_display_name(self) -> str:
        return self.display_name_raw + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Context) -> str | None:
        return None


def clean_arguments(command: Command) -> Command:
    """`command` (and every command under it) with its arguments shown as `Argument` shows
    them. typer builds its own argument class and takes no other, so the class is swapped on
    the built parameters (a subclass that only changes how they are displayed)."""
    for param in command.params:
        if type(param) is TyperArgument:
            param.__class__ = Argument
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            clean_arguments(sub)
    return command


class Root(TyperGroup):
    """The root group: `LAZY` maps a group's name to its one-line help and to what imports
    it; every command's arguments are shown as `Argument` shows them."""

    LAZY: ClassVar[dict[str, tuple[str, Callable[[], typer.Typer]]]] = {}
    listing = False

    def __init__(self, **attrs: object) -> None:
        super().__init__(**attrs)  # type: ignore[arg-type]
        clean_arguments(self)

    def list_commands(self, ctx: Context) -> list[str]:
        names = super().list_commands(ctx)
        # Where typer lists an added group: after the commands, before the groups.
        first_group = next((i for i, name in enumerate(names)
                            if isinstance(self.commands[name], TyperGroup)), len(names))
        lazy = [name for name in self.LAZY if name not in self.commands]
        return names[:first_group] + lazy + names[first_group:]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name in self.LAZY and cmd_name not in self.commands:
            help_text, load = self.LAZY[cmd_name]
            if self.listing:
                return TyperCommand(cmd_name, help=help_text)
            group = typer.main.get_group(load())
            group.name = cmd_name
            self.commands[cmd_name] = clean_arguments(group)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        # Listing the commands shows a lazy group's help without importing it.
        self.listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self.listing = False
