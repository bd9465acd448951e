"""Every command line of README.md and docs/*.md is checked as written.

A documented command that fails on its first word, an option renamed, a value no longer a
choice or a script moved away, is a wrong answer the reader finds only by typing it. The lines
are found by `tests/docs/command_lines.py`; each is checked by its command word, without
running its work:

- `datapipe ...`: run in-process with `--help` added, so the real CLI resolves the command
  path and every option name as written; then read by that command's own click parser, every
  value converted by its parameter's type (a value that is not a choice fails), the arguments
  counted. Paths need not exist. In a synopsis, a `...` after a group stands for one of its
  commands (the group is checked), elsewhere for arguments (the options given are checked).
  Prose naming a command without arguments (`datapipe verify`) is checked as a command path.
- `python -m X` / `python X.py` / `X.py ARGS`: X is in this checkout; a script with a command
  line is run in-process up to it: argparse reads the arguments as written and the script
  stops there (a click script gets `--help` added); nothing after runs.
- `torchrun ...`: torch's own parser reads it as written (the training script does not run).
- `make X`: a target of the Makefile; `bash tools/X.sh`: the file exists;
  `pip install ...`: every extra named of datapipe is one pyproject.toml defines.
- `accelerate ...`: run by tests/docs/test_accelerate_page.py, which starts the processes.
- The words in `UNCHECKED` are not checked, each for the reason given; a command with any
  other word fails until it gets a check or a reason. A line that cannot be checked as written
  has an entry in `ALLOWED`; an entry that matches no line any more fails too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import shlex
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import click
import pytest
from click.testing import CliRunner

import datapipe.cli
from datapipe.cli import cli
from datapipe.errors import DatapipeError
from tests.docs.command_lines import ELIDED, CommandLine, find_command_lines
from tests.docs.test_accelerate_page import PAGE as ACCELERATE_PAGE
from tests.docs.test_accelerate_page import documented_commands

try:
    from click._utils import UNSET  # what click's parser gives an argument not given (8.2+)
except ImportError:
    UNSET = None

ROOT = Path(__file__).resolve().parents[2]
HELP = ("--help", "-h")

# Command words whose lines are not checked, and why (any other word needs a check).
UNCHECKED = {
    "export": "sets the environment of the lines after it; datapipe's variables are tested "
              "where they are read",
    "ray": "Ray's own cluster command (`ray start`), an optional extra; its options are Ray's",
    "git": "version control: nothing of datapipe's to check",
    "curl": "fetches a URL: nothing of this checkout to check",
}

# Lines that cannot be checked as written: (page, text as written) -> why.
ALLOWED = {
    ("docs/REMOTE.md", "python -m moto.server"):
        "moto's S3 server (the dev extra), named as what served the measured figures: a "
        "third-party module, not one of this checkout",
}


class _Parsed(Exception):
    """A script's command line was read as written (args: what is wrong with it, if anything):
    stop it before it does its work."""


def _failure(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "failed without a message"


# datapipe ------------------------------------------------------------------------------------

def _subcommand_elided(args: list[str]) -> list[str] | None:
    """The command path before a `...` standing for a subcommand (`datapipe convert ...`)."""
    command: click.Command | None = cli
    for i, word in enumerate(args):
        if not isinstance(command, click.Group):
            return None
        if word == ELIDED:
            return args[:i]
        command = command.commands.get(word)
    return None


def _with_help(args: list[str]) -> list[str]:
    """ARGS asking for help; before a `--`, after which words are the wrapped command's."""
    cut = args.index("--") if "--" in args else len(args)
    return [*args[:cut], "--help", *args[cut:]]


def check_datapipe(command: CommandLine) -> str | None:
    return _check_cli(list(command.argv[1:]), inline=command.inline)


def _check_cli(args: list[str], inline: bool) -> str | None:
    path = _subcommand_elided(args)
    words = path if path is not None else [a for a in args if a != ELIDED]
    result = CliRunner().invoke(cli, _with_help(words), prog_name="datapipe")
    if result.exit_code != 0:
        exc = result.exception
        if exc is not None and not isinstance(exc, SystemExit):
            return f"{type(exc).__name__}: {exc}"
        return _failure(result.output)
    if path is not None or any(a in HELP for a in words):
        return None
    return _parse_values(words, elided=len(words) != len(args), inline=inline)


def _missing(value: object) -> bool:
    return value is None or value is UNSET or (isinstance(value, tuple) and UNSET in value)


def _parse_values(words: list[str], elided: bool, inline: bool) -> str | None:
    """Read WORDS with the parser of the command they name, converting every value by its
    parameter's type (paths excepted: they need not exist here)."""
    command: click.Command = cli
    parent, name = click.Context(cli, info_name="datapipe"), ""
    while isinstance(command, click.Group):
        if not words:  # a group named in prose (`datapipe convert`) is fine
            return None if inline else "names a group, not one of its commands"
        if command is not cli:
            parent = click.Context(command, info_name=name, parent=parent)
        name, words = words[0], words[1:]
        command = command.commands[name]  # the help run resolved the path
    if inline and not words:
        return None  # prose naming a command (`datapipe verify`), not a line to type
    try:
        # `bench` hands the line to the form it is written in; that form parses it.
        form = command.make_context(name, list(words), parent=parent,
                                    resilient_parsing=True).command
        strict = click.Context(form, info_name=name, parent=parent, **form.context_settings)
        opts, extra, _ = form.make_parser(strict).parse_args(list(words))
        if extra and not elided and not strict.allow_extra_args:
            return f"unexpected extra argument(s): {' '.join(extra)}"
        for param in form.get_params(strict):
            if _missing(opts.get(param.name)):
                if param.required and not elided:
                    return f"missing {param.get_error_hint(strict)}"
            elif not isinstance(param.type, click.Path) and not (
                    elided and isinstance(param, click.Argument)):  # arguments left out
                try:
                    param.type_cast_value(strict, opts[param.name])
                except click.BadParameter as exc:
                    return f"{param.get_error_hint(strict)}: {exc.format_message()}"
    except (click.UsageError, DatapipeError) as exc:
        message = exc.format_message() if isinstance(exc, click.UsageError) else str(exc)
        return message
    return None


# python scripts and modules, torchrun --------------------------------------------------------

def _run_up_to_parse(run: Callable[[], object], argv0: str, args: list[str]) -> str | None:
    """Run a script in this process with ARGS and `--help`, and stop it where it reads them:
    argparse reads ARGS as written (unknown options and bad values fail); a script handing its
    line to `datapipe.cli.main` has it checked as a datapipe line; a click command of its own
    sees `--help`."""
    original = argparse.ArgumentParser.parse_args

    def as_written(given: list[str] | None) -> list[str]:
        given = list(sys.argv[1:] if given is None else given)
        return given[:-1] if given[-1:] == ["--help"] else given

    def parse_as_written(self: argparse.ArgumentParser, given: list[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        original(self, as_written(given), namespace)
        raise _Parsed

    def datapipe_as_written(given: list[str] | None = None) -> None:
        raise _Parsed(_check_cli(as_written(given), inline=False))

    output = io.StringIO()
    saved = sys.argv, list(sys.path)
    sys.argv = [argv0, *args, "--help"]
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), \
                mock.patch.object(argparse.ArgumentParser, "parse_args", parse_as_written), \
                mock.patch.object(datapipe.cli, "main", datapipe_as_written), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run()
    except _Parsed as parsed:
        return parsed.args[0] if parsed.args else None
    except SystemExit as exc:
        return None if exc.code in (0, None) else _failure(output.getvalue())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        sys.argv, sys.path[:] = saved
    if output.getvalue().startswith("Usage:"):
        return None  # a click command returned from its help (datapipe.cli.main does)
    return "ran to its end without reading a command line"


def check_python(command: CommandLine) -> str | None:
    argv = list(command.argv)
    if command.word in ("python", "python3"):
        argv = argv[1:]
    if not argv or (argv[0].startswith("-") and argv[0] != "-m"):
        return "only `python -m MODULE` and `python FILE.py` lines are checked"
    if argv[0] == "-m":
        module, args = argv[1], argv[2:]
        base = ROOT.joinpath(*module.split("."))
        file = next((f for f in (base.with_suffix(".py"), base / "__main__.py") if f.is_file()),
                    None)
        if file is None:
            return f"no module {module} in this checkout"
        run = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        file, args = ROOT / argv[0], argv[1:]
        if not file.is_file():
            return f"no file {argv[0]} in this checkout"
        run = lambda: runpy.run_path(str(file), run_name="__main__")  # noqa: E731
    source = file.read_text()
    if "argparse" in source and ".parse_args(" not in source:
        return "reads its arguments in a way this test cannot stop at: give it a check"
    if not re.search(r"\bargparse\b|\bclick\b|datapipe\.cli\b", source):
        return f"has no command line, yet is given {' '.join(args)}" if args else None
    return _run_up_to_parse(run, str(file), args)


def check_torchrun(command: CommandLine) -> str | None:
    def run() -> None:
        runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)

    return _run_up_to_parse(run, "torchrun", list(command.argv[1:]))


# make, bash, pip, accelerate -----------------------------------------------------------------

def check_make(command: CommandLine) -> str | None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w.-]+)\s*:(?!=)", makefile, re.M))
    missing = [t for t in command.argv[1:] if not t.startswith("-") and t not in targets]
    return f"no target {', '.join(missing)} in the Makefile" if missing else None


def check_bash(command: CommandLine) -> str | None:
    script = next((a for a in command.argv[1:] if not a.startswith("-")), None)
    if script is None or not (ROOT / script).is_file():
        return f"no script {script} in this checkout"
    return None


def check_pip(command: CommandLine) -> str | None:
    if re.search(r"(^|\s)(datapipe|\.)\[", command.text):
        return "quote the requirement ('datapipe[x]'): zsh, macOS's shell, reads [x] as a pattern"
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([\w-]+)\s*=", section, re.M))
    for word in command.argv[1:]:
        named = re.match(r"^(datapipe|\.)\[([^\]]*)\]$", word)
        unknown = [e for e in named.group(2).split(",") if e not in extras] if named else []
        if unknown:
            return f"no extra {', '.join(unknown)} in pyproject.toml (it has {sorted(extras)})"
    return None


def check_accelerate(command: CommandLine) -> str | None:
    # test_accelerate_page.py runs these lines and checks the processes they start.
    run_there = {text for text, _ in documented_commands(ACCELERATE_PAGE)}
    if command.path == "docs/accelerate.md" and command.text in run_there:
        return None
    return "an accelerate line that tests/docs/test_accelerate_page.py does not run"


CHECKS: dict[str, Callable[[CommandLine], str | None]] = {
    "datapipe": check_datapipe,
    "python": check_python,
    "python3": check_python,
    "torchrun": check_torchrun,
    "make": check_make,
    "bash": check_bash,
    "pip": check_pip,
    "accelerate": check_accelerate,
}


def _check(command: CommandLine) -> str | None:
    if command.word.endswith(".py"):  # a script given with arguments, in prose
        return check_python(command)
    if command.word in UNCHECKED:
        return None
    check = CHECKS.get(command.word)
    if check is None:
        return f"no check for `{command.word}`: add one, or a reason to UNCHECKED"
    return check(command)


def _lines() -> list[CommandLine]:
    return find_command_lines(ROOT, set(CHECKS) | set(UNCHECKED))


def _failures(kinds: Callable[[CommandLine], bool]) -> list[str]:
    failures = []
    for command in _lines():
        if kinds(command) and (command.path, command.text) not in ALLOWED:
            problem = _check(command)
            if problem:
                failures.append(f"{command}: {problem}")
    return failures


def _report(failures: list[str]) -> None:
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


def test_the_docs_command_lines_are_found() -> None:
    found = _lines()
    words = {c.word for c in found}
    assert {"datapipe", "python", "make", "bash"} <= words, words
    assert any(c.inline for c in found) and any(not c.inline for c in found)


def test_every_datapipe_command_parses_as_written() -> None:
    _report(_failures(lambda c: c.word == "datapipe"))


@pytest.mark.slow  # imports what the scripts import (torch, Lightning)
def test_every_script_exists_and_reads_its_arguments_as_written() -> None:
    _report(_failures(lambda c: c.word in ("python", "python3", "torchrun")
                      or c.word.endswith(".py")))


def test_every_other_command_names_what_exists() -> None:
    _report(_failures(lambda c: c.word not in ("datapipe", "python", "python3", "torchrun")
                      and not c.word.endswith(".py")))


def test_every_allowed_line_is_still_in_the_docs() -> None:
    written = {(c.path, c.text) for c in _lines()}
    _report([f"{page}: `{text}` is allowed ({why}) but no longer written there"
             for (page, text), why in ALLOWED.items() if (page, text) not in written])


@pytest.mark.parametrize("line, problem", [
    ("datapipe bench --suite images --corpus-mb 5", "No such option '--corpus-mb'"),
    ("datapipe bench --suite imagez", "'imagez' is not one of"),
    ("datapipe convert images SRC OUT --engine rya", "'rya' is not one of"),
    ("datapipe convert imagez SRC OUT", "No such command 'imagez'"),
    ("datapipe bench DATASET --suite images", "give a DATASET or --suite, not both"),
    ("datapipe inspect A B", "unexpected extra argument(s): B"),
    ("datapipe verify", "missing 'DATASET'"),
    ("python -m benchmarks.bench_nothing", "no module benchmarks.bench_nothing"),
    ("python -m benchmarks.bench_loader --photos DIR", "'DIR' is not a valid integer"),
    ("python -m tools.make_sample_data OUT --pictures 4", "unrecognized arguments: --pictures"),
    ("make nothing", "no target nothing in the Makefile"),
    ("bash tools/nothing.sh", "no script tools/nothing.sh"),
    ("pip install 'datapipe[nothing]'", "no extra nothing in pyproject.toml"),
    ("pip install datapipe[ray]", "quote the requirement"),
    ("accelerate launch --cpu examples/accelerate_train.py sample/images", "does not run"),
    ("nothing --help", "no check for `nothing`"),
])
def test_a_wrong_line_is_one_line_saying_what_is_wrong(line: str, problem: str) -> None:
    command = CommandLine("docs/example.md", 1, line, tuple(shlex.split(line)), inline=False)
    found = _check(command)
    assert found is not None and problem in found and "\n" not in found, found
