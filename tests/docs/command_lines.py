"""The command lines of README.md and docs/*.md, read as a reader would type them.

- **Fenced blocks.** Every line of a ```bash, ```sh, ```shell or ```console block (in a console
  block, only the lines with a `$ ` prompt); a plain ``` block holds commands when its first
  word is one of the command words the caller knows, and is a listing or program output
  otherwise. Continuation lines (a trailing `\\`) are joined, a `$ ` prompt is stripped,
  comments are dropped, and a line of several commands (`a && b`, `a | b`, `a; b`) gives each
  of them.
- **Inline spans** that start as a command does: `datapipe ...`, `.venv/bin/...`,
  `python -m ...`, `python X.py ...`, `bash tools/...`, `make ...`, `pip install ...`, and a
  script given with arguments (`tools/make_photos.py --count 3000`). A span that is only a
  path, or an option alone (`--short-side 256`), is not a command. Prose spans are synopses:
  `images|text` stands for each alternative (every one is checked), `[--device cuda]` for an
  optional part (checked as if given), and `...` for words left out (see `ELIDED`).
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

SHELL_BLOCKS = frozenset({"bash", "sh", "shell", "console"})
ELIDED = "..."  # a word of a synopsis standing for words left out
OPERATORS = frozenset({";", "&&", "||", "|", "&"})
REDIRECTS = frozenset({">", ">>", "<"})
VENV_BIN = ".venv/bin/"

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<lang>[^`\s]*)")
INLINE = re.compile(r"(?<!`)`(?!`)([^`]+?)`(?!`)")
INLINE_COMMAND = re.compile(
    r"^(datapipe |\.venv/bin/\S|python3? (-m \S|\S+\.py\b)|bash tools/|make \S|pip install "
    r"|[\w./-]+\.py \S)")
OPTIONAL = re.compile(r"(?<!\S)\[([^\[\]]*)\]")  # `[--device cuda]`, not `datapipe[remote]`


@dataclass(frozen=True)
class CommandLine:
    """One command of the docs: where it is, the text as written, and the words to check."""

    path: str  # relative to the repository root
    line: int
    text: str  # as written (continuations joined, prompt and comment off)
    argv: tuple[str, ...]  # one command of it; for a synopsis, one reading of it
    inline: bool
    reread: bool = False  # argv is not simply the text's words (a synopsis, several commands)

    @property
    def word(self) -> str:
        """The command word, without a `.venv/bin/` prefix."""
        return _command_word(self.argv[0])

    def __str__(self) -> str:
        shown = f"`{self.text}`"
        if self.reread:
            shown += f" (read as `{' '.join(self.argv)}`)"
        return f"{self.path}:{self.line}: {shown}"


def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def find_command_lines(root: Path, command_words: Collection[str]) -> list[CommandLine]:
    """Every command line of the pages; `command_words` tell a plain ``` block of commands
    (its first word is one, a `.venv/bin/` prefix taken off) from a listing."""
    found: list[CommandLine] = []
    for page in documents(root):
        text = page.read_text()
        name = page.relative_to(root).as_posix()
        prose, blocks = _split_fences(text)
        for line, lang, body in blocks:
            found += _block_commands(name, line, lang, body, command_words)
        found += _inline_commands(name, prose)
    return found


def _split_fences(text: str) -> tuple[str, list[tuple[int, str, list[str]]]]:
    """The page with fenced blocks blanked out (line numbers kept), and each block:
    (line of its first content line, language, its lines without the fence's indent)."""
    prose: list[str] = []
    blocks: list[tuple[int, str, list[str]]] = []
    open_fence: re.Match[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line)
        if open_fence is None:
            if fence:
                open_fence = fence
                blocks.append((number + 1, fence["lang"].lower(), []))
            prose.append("" if fence else line)
            continue
        prose.append("")
        if fence and fence["fence"].startswith(open_fence["fence"]) and not fence["lang"]:
            open_fence = None
            continue
        indent = open_fence["indent"]
        blocks[-1][2].append(line[len(indent):] if line.startswith(indent) else line.lstrip())
    return "\n".join(prose), blocks


def _logical_lines(first: int, lines: list[str]) -> list[tuple[int, str]]:
    """(line number, text) with continuations joined."""
    joined: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=first):
        start, text = pending if pending else (number, "")
        text = f"{text} {line.strip()}".strip()
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
            continue
        pending = None
        joined.append((start, text))
    if pending:
        joined.append(pending)
    return joined


def _block_commands(page: str, first: int, lang: str, lines: list[str],
                    command_words: Collection[str]) -> list[CommandLine]:
    if lang and lang not in SHELL_BLOCKS:
        return []
    commands: list[tuple[int, str]] = []
    for number, text in _logical_lines(first, lines):
        if lang == "console" and not text.startswith("$ "):
            continue  # program output
        text = text.removeprefix("$ ")
        words = _words(text)
        if words:
            commands.append((number, _without_comment(text)))
    if not commands:
        return []
    if not lang and _command_word(_words(commands[0][1])[0]) not in command_words:
        return []  # a listing, a layout, program output
    found = []
    for number, text in commands:
        parts = _commands_of(_words(text))
        for argv in parts:
            found.append(CommandLine(page, number, text, tuple(argv), inline=False,
                                     reread=len(parts) > 1))
    return found


def _inline_commands(page: str, prose: str) -> list[CommandLine]:
    found = []
    for match in INLINE.finditer(prose):
        span = " ".join(match.group(1).split())  # a span may be wrapped over two lines
        if "\n\n" in match.group(1) or not INLINE_COMMAND.match(span):
            continue
        line = prose.count("\n", 0, match.start()) + 1
        words = _words(OPTIONAL.sub(r"\1", span).replace("|", " \x00 "))
        # `images|text` was cut into words around NUL markers: put each alternative back.
        for reading in _readings(_alternatives(words)):
            found.append(CommandLine(page, line, span, tuple(reading), inline=True,
                                     reread=reading != _words(span)))
    return found


def _alternatives(words: list[str]) -> list[list[str]]:
    """Each word as the list of its alternatives (`images|text`: both)."""
    slots: list[list[str]] = []
    joining = False
    for word in words:
        if word == "\x00":
            joining = True
        elif joining:
            slots[-1].append(word)
            joining = False
        else:
            slots.append([word])
    return slots


def _readings(slots: list[list[str]]) -> list[list[str]]:
    return [list(choice) for choice in itertools.product(*slots)]


def _words(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote: read it as plain words
        return text.split()


def _without_comment(text: str) -> str:
    """The line as written, without a trailing `# comment`."""
    return re.sub(r"(^|\s)#.*$", "", text).rstrip()


def _command_word(word: str) -> str:
    return word[len(VENV_BIN):] if word.startswith(VENV_BIN) else word


def _commands_of(words: list[str]) -> list[list[str]]:
    """The commands of a shell line: split at ; && || | &, redirections and leading
    environment assignments (`NAME=value cmd`) taken off."""
    commands: list[list[str]] = [[]]
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
        elif word in OPERATORS:
            commands.append([])
        elif word in REDIRECTS:
            skip_next = True  # the redirection's target
        elif not commands[-1] and re.match(r"^[A-Za-z_]\w*=", word):
            continue  # NAME=value before a command sets its environment
        else:
            commands[-1].append(word)
    return [c for c in commands if c]
