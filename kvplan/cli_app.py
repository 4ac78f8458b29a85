"""The typer app: every command's click definition, and running a command line through it.

`kvplan.cli` is the entry point; it runs plain `kvplan size` lines without this module.
"""

import inspect
import math
import sys
from collections.abc import Callable
from typing import Any, Optional

import typer

from kvplan import cli_size
from kvplan.errors import EXIT_BAD_INPUT

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Capacity planning for LLM serving: vLLM KV-cache sizing and more.",
                  pretty_exceptions_enable=False)

CatalogOpt = typer.Option(None, *cli_size.OPTIONS["catalog"][0],
                          help=cli_size.OPTIONS["catalog"][1])


def _size_command() -> Callable[..., None]:
    """`kvplan size` for typer: `cli_size.run`'s signature with each parameter's default
    wrapped in the typer Argument/Option that `cli_size.OPTIONS` declares."""
    sig = inspect.signature(cli_size.run)
    params = [p.replace(default=typer.Argument(..., help=cli_size.MODEL_HELP))
              if p.name == "model" else
              p.replace(default=typer.Option(p.default, *cli_size.OPTIONS[p.name][0],
                                             help=cli_size.OPTIONS[p.name][1]))
              for p in sig.parameters.values()]

    def size_cmd(**kwargs: Any) -> None:
        code = cli_size.run(**kwargs)  # looked up on each call (tests replace it)
        if code:
            raise typer.Exit(code)

    size_cmd.__signature__ = sig.replace(parameters=params,  # type: ignore[attr-defined]
                                         return_annotation=None)
    size_cmd.__annotations__ = {p.name: p.annotation for p in params}
    size_cmd.__doc__ = cli_size.run.__doc__
    return size_cmd


size_cmd = app.command("size")(_size_command())


models_app = typer.Typer(add_completion=False, rich_markup_mode=None,
                         help="The model catalog: list, add from the Hub, export for offline use.")
app.add_typer(models_app, name="models")


@models_app.callback(invoke_without_command=True)
def models_cmd(ctx: typer.Context, catalog: Optional[list[str]] = CatalogOpt,
               as_json: bool = typer.Option(False, "--json")) -> None:
    """List the catalog's models."""
    if ctx.invoked_subcommand is not None:
        return
    from kvplan import catalog as cat_mod
    from kvplan.render.tables import render_models

    cat = cat_mod.load("models", catalog)
    render_models(cat, as_json)


@models_app.command("add")
def models_add(
    repo_ids: list[str] = typer.Argument(..., help="Hub repo ids to add."),
    catalog: Optional[str] = typer.Option(None, "--catalog", help="Catalog file to write "
                                          "(default: ~/.config/kvplan/models.yaml)."),
    alias: Optional[list[str]] = typer.Option(None, "--alias", help="Alias for the (single) "
                                              "model; repeatable."),
    revision: Optional[str] = typer.Option(None, "--revision"),
    token: Optional[str] = typer.Option(None, "--token"),
) -> None:
    """Fetch config and exact weight bytes from the Hub into a user catalog file."""
    from kvplan import catalog as cat_mod
    from kvplan.sources.hub import load_hub

    if alias and len(repo_ids) > 1:
        raise typer.BadParameter("--alias needs exactly one repo id")
    entries = {}
    for rid in repo_ids:
        rec = load_hub(rid, revision=revision, token=token, offline=False)
        entries[rid] = cat_mod.entry_from_record(rec, alias)
    path = catalog or str(cat_mod.default_user_catalog())
    cat_mod.write_models(path, entries)
    for rid, e in entries.items():
        w = e.get("weights_bytes")
        sys.stdout.write(f"added {rid} to {path}"
                         + (f" ({w:,} weight bytes)" if w else " (weights will be estimated)")
                         + "\n")


@models_app.command("export")
def models_export(
    ids: list[str] = typer.Argument(..., help="Catalog ids/aliases or Hub repo ids."),
    output: str = typer.Option(..., "--output", "-o", help="Catalog file to write."),
    catalog: Optional[list[str]] = CatalogOpt,
    token: Optional[str] = typer.Option(None, "--token"),
) -> None:
    """Write catalog entries to a file to carry into a site without network."""
    from kvplan import catalog as cat_mod
    from kvplan.sources.hub import load_hub, looks_like_repo_id

    cat = cat_mod.load("models", catalog)
    entries = {}
    for name in ids:
        hit = cat.get(name)
        if hit:
            entries[hit[0]] = hit[1]
        elif looks_like_repo_id(name):
            entries[name] = cat_mod.entry_from_record(load_hub(name, token=token, offline=False))
        else:
            close = cat.suggestions(name)
            from kvplan.errors import BadInput

            raise BadInput(f"unknown model {name!r}",
                           hint=f"did you mean {', '.join(close)}?" if close else None)
    cat_mod.write_models(output, entries)
    sys.stdout.write(f"wrote {len(entries)} model(s) to {output}\n")


@app.command("gpus")
def gpus_cmd(catalog: Optional[list[str]] = CatalogOpt,
             as_json: bool = typer.Option(False, "--json")) -> None:
    """List the catalog's GPUs."""
    from kvplan import catalog as cat_mod
    from kvplan.render.tables import render_gpus

    cat = cat_mod.load("gpus", catalog)
    render_gpus(cat, as_json)


_registered = False


def full_app() -> typer.Typer:
    """The app with every command (the planning, check, simulate and diagnose modules)."""
    global _registered
    if not _registered:
        from kvplan import cli_check, cli_diagnose, cli_plan, cli_simulate

        for mod in (cli_plan, cli_check, cli_simulate, cli_diagnose):
            mod.register(app)
        _registered = True
    return app


def _app_for(argv: list[str]) -> typer.Typer:
    """`kvplan size ...` runs through an app holding that command alone: building the click
    commands of every subcommand costs about 10 ms of a ~140 ms run (benchmarks/speed.py)."""
    if argv[:1] == ["size"]:
        fast = typer.Typer(add_completion=False, rich_markup_mode=None,
                           pretty_exceptions_enable=False)
        fast.callback()(lambda: None)  # keeps `size` a subcommand
        fast.command("size")(size_cmd)
        return fast
    return full_app()


def _strict_types(cmd: Any) -> None:
    """Every float option of `cmd` and its subcommands refuses nan and inf (click's FLOAT
    takes them, and they reach the arithmetic), and every text option an empty or blank value
    (`--gpu-memory "$MEM"` with MEM unset must not size the catalog's GPU)."""
    import click

    from kvplan.cli_fast import EMPTY_OK
    from kvplan.errors import BadInput

    class Finite(click.types.FloatParamType):
        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            v = super().convert(value, param, ctx)
            if not math.isfinite(v):
                self.fail(f"{value!r} is not a finite number", param, ctx)
            return v

    class Given(click.types.StringParamType):
        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            v = super().convert(value, param, ctx)
            if isinstance(v, str) and not v.strip() and param is not None:
                flag = max(param.opts, key=len)
                raise BadInput(f"{flag} is empty", hint="an unset shell variable? give a "
                               "value or leave the option out")
            return v

    finite, given = Finite(), Given()
    for sub in getattr(cmd, "commands", {}).values():
        _strict_types(sub)
    for p in cmd.params:
        if type(p.type) is click.types.FloatParamType:
            p.type = finite
        elif (type(p.type) is click.types.StringParamType and isinstance(p, click.Option)
              and p.name not in EMPTY_OK):
            p.type = given


def invoke(args: list[str]) -> int:
    """Run a command line through typer; click's usage errors are one line and exit 2."""
    import click

    # our apps render help without rich (rich_markup_mode=None), but typer 0.19 still
    # escapes "[default: ...]" for rich whenever rich is importable: "\[default: 1]"
    typer.core.HAS_RICH = False
    cmd = typer.main.get_command(_app_for(args))
    _strict_types(cmd)
    try:
        rv = cmd.main(args=args, prog_name="kvplan", standalone_mode=False)
    except typer.Exit as e:
        return e.exit_code
    except click.exceptions.Abort:
        return 130
    except click.ClickException as e:
        no_args = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click 8.2+: the help
        sys.stderr.write(e.format_message() + "\n" if isinstance(e, no_args) else
                         f"kvplan: error: {e.format_message()}\n")
        return EXIT_BAD_INPUT
    return rv if isinstance(rv, int) else 0
