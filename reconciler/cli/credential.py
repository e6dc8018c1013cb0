"""`reconciler credential`: named credentials with roles for `serve`, kept as hashes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli.options import EXIT_BAD_INPUT

credential_app = typer.Typer(help="Named credentials with roles (worker, operator, evidence, "
                             "admin) for `serve`.", no_args_is_help=True)


@credential_app.command("add")
def credential_add_command(
    name: Annotated[str, typer.Argument(help="The credential's name: the actor recorded for "
                                             "its decisions.")],
    role: Annotated[list[str], typer.Option(
        metavar="ROLE", help="worker, operator, evidence or admin; repeat for several.")],
    file: Annotated[Path, typer.Option(
        envvar="RECONCILER_CREDENTIALS_FILE",
        help="The credentials file serve reads (created 0600; hashes only).")],
) -> None:
    """Add (or replace) a credential in the credentials file and print its token once: the
    file keeps only the token's SHA-256, so it cannot be shown again."""
    from reconciler.service.credentials import CredentialError, add_to_file

    try:
        token = add_to_file(file, name, role)
    except CredentialError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    typer.echo(token)


@credential_app.command("token")
def credential_token_command() -> None:
    """Print a fresh token (for RECONCILER_TOKEN or RECONCILER_CREDENTIAL_<NAME>)."""
    from reconciler.service.credentials import new_token

    typer.echo(new_token())
