"""Supervised fine-tuning records in JSONL: what kind of text a file holds, and each record
checked into a `Chat` or a `PromptCompletion` (or the reason it is a reject).

Two layouts, as TRL's SFTTrainer reads them: prompt/completion,
`{"prompt": "...", "completion": "..."}`, and chat, `{"messages": [{"role": "user",
"content": "..."}, ...]}`. Which one a run reads is said (`--text-kind`) or told from the first
JSON object of each JSONL file, before any work starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datapipe.errors import ArgumentError, DataError

PLAIN, PROMPT_COMPLETION, CHAT = "plain", "prompt-completion", "chat"
TEXT_KINDS = (PLAIN, PROMPT_COMPLETION, CHAT)
LOSS_ON = ("assistant", "completion", "all")
DEFAULT_LOSS_ON = {CHAT: "assistant", PROMPT_COMPLETION: "completion"}
MESSAGES_FIELD = "messages"
ROLES = ("system", "developer", "user", "assistant", "tool")
_SCANNED_LINES = 100  # looked at for a file's first JSON object


@dataclass(frozen=True)
class Chat:
    messages: tuple[dict[str, str], ...]  # each with a known "role" and a string "content"


@dataclass(frozen=True)
class PromptCompletion:
    prompt: str
    completion: str


def check_loss_on(kind: str, loss_on: str | None) -> None:
    """Refuse a --loss-on that does not fit the kind of text."""
    if loss_on is None:
        return
    if loss_on not in LOSS_ON:
        raise ArgumentError(f"--loss-on: {loss_on!r} is not one of {', '.join(LOSS_ON)}")
    if kind == PLAIN:
        raise ArgumentError("--loss-on applies to prompt-completion and chat JSONL only; "
                            "plain text keeps every token")
    fits = ("all", DEFAULT_LOSS_ON[kind])
    if loss_on not in fits:
        raise ArgumentError(f"--loss-on {loss_on}: {kind} text takes {' or '.join(fits)}")


def detect_kind(files: list[Path], said: str, prompt_field: str,
                completion_field: str) -> str:
    """The one kind of text of every file: `said` (checked against the files), or told by
    each JSONL file's first object; .txt and Parquet files are plain text."""
    if said not in ("auto", *TEXT_KINDS):
        raise ArgumentError(f"--text-kind: {said!r} is not one of auto, {', '.join(TEXT_KINDS)}")
    if said == PLAIN:
        return PLAIN  # read as the run says, each record checked by its worker
    kinds: dict[str, Path] = {}
    for path in files:
        record = _first_object(path) if path.suffix.lower() in (".jsonl", ".ndjson") else None
        kind = _kind_of(record, prompt_field, completion_field)
        if said in (PROMPT_COMPLETION, CHAT):
            _require_sft_file(path, record, said, prompt_field, completion_field)
        elif kind is not None:
            kinds.setdefault(kind, path)
    if said != "auto":
        return said
    if len(kinds) > 1:
        found = " and ".join(f"{kind} ({path})" for kind, path in kinds.items())
        raise ArgumentError(f"SRC mixes {found}: convert them apart, or say --text-kind")
    return next(iter(kinds), PLAIN)


def _kind_of(record: dict[str, Any] | None, prompt_field: str,
             completion_field: str) -> str | None:
    if record is None:
        return None  # a file with no object yet says nothing
    if MESSAGES_FIELD in record:
        return CHAT
    if prompt_field in record and completion_field in record:
        return PROMPT_COMPLETION
    return PLAIN


def _require_sft_file(path: Path, record: dict[str, Any] | None, kind: str, prompt_field: str,
                      completion_field: str) -> None:
    """A file given as chat or prompt/completion: JSONL whose first object has the fields."""
    if path.suffix.lower() not in (".jsonl", ".ndjson"):
        raise ArgumentError(f"--text-kind {kind}: {path} is not a .jsonl file")
    needed = (MESSAGES_FIELD,) if kind == CHAT else (prompt_field, completion_field)
    missing = [name for name in needed if record is not None and name not in record]
    if missing:
        option = "--text-kind" if kind == CHAT else "--prompt-field/--completion-field"
        raise ArgumentError(f"{path}: the first record has no field {missing[0]!r} (check "
                            f"{option})")


def _first_object(path: Path) -> dict[str, Any] | None:
    """The first JSON object among the file's first lines, if any."""
    try:
        with open(path, "rb") as file:
            for _ in range(_SCANNED_LINES):
                line = file.readline()
                if not line:
                    return None
                try:
                    # Decoded first, the bytes dropped: a first line may be a 200 MB document.
                    line = line.decode("utf-8-sig")
                    record = json.loads(line)
                except ValueError:  # UnicodeDecodeError too
                    continue
                if isinstance(record, dict):
                    return record
    except OSError as exc:
        raise DataError(f"{path}: unreadable ({exc.strerror or exc})") from None
    return None


def chat_record(record: dict[str, Any], need_assistant: bool) -> Chat | str:
    """The record's conversation, or why it is a reject."""
    messages = record.get(MESSAGES_FIELD)
    if not isinstance(messages, list):
        return f"field {MESSAGES_FIELD!r} is {json_kind(messages)}, not an array"
    if not messages:
        return "no messages"
    for number, message in enumerate(messages, 1):
        problem = _message_problem(message)
        if problem:
            return f"message {number}: {problem}"
    if need_assistant and not any(m["role"] == "assistant" for m in messages):
        return "no assistant turn (nothing for the loss to count)"
    return Chat(tuple(messages))


def _message_problem(message: object) -> str | None:
    if not isinstance(message, dict):
        return f"{json_kind(message)}, not an object"
    role, content = message.get("role"), message.get("content")
    if not isinstance(role, str):
        return "no role" if role is None else f"role is {json_kind(role)}, not a string"
    if role not in ROLES:
        return f"unknown role {role!r} (roles: {', '.join(ROLES)})"
    if not isinstance(content, str):
        return f"content is {json_kind(content)}, not a string"
    return None


def prompt_completion_record(record: dict[str, Any], prompt_field: str,
                             completion_field: str) -> PromptCompletion | str:
    """The record's prompt and completion, or why it is a reject."""
    texts = []
    for name in (prompt_field, completion_field):
        if name not in record:
            return f"no field {name!r}"
        if not isinstance(record[name], str):
            hint = " (write a conversation as messages)" if isinstance(record[name], list) \
                else ""
            return f"field {name!r} is {json_kind(record[name])}, not a string{hint}"
        texts.append(record[name])
    return PromptCompletion(*texts)


def json_kind(value: object) -> str:
    """'null', 'a number', ...: a JSON value's kind, as a reject's reason names it."""
    if value is None:
        return "null"
    kinds = ((str, "a string"), (bool, "a boolean"), ((int, float), "a number"),
             (list, "an array"), (dict, "an object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)
