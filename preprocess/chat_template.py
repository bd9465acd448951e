"""Chat records into token ids and an assistant mask, through a Hugging Face tokenizer's chat
template (`transformers`, an optional dependency: pip install 'datapipe[sft]').

A template that marks assistant text with `{% generation %}` gives the mask itself
(`apply_chat_template(..., return_assistant_tokens_mask=True)`). For one without the markers the
assistant spans are found by rendering prefixes of the conversation: turn i's text runs from the
end of `messages[:i]` rendered with the generation prompt to the end of `messages[:i + 1]`, and
a token belongs to it when it starts inside.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from datapipe.errors import ArgumentError
from datapipe.format.hashing import hash_bytes
from preprocess.sft_records import Chat

_GENERATION = re.compile(r"{%-?\s*generation\s*-?%}")
_SIDE_FILES = ("tokenizer_config.json", "chat_template.jinja", "chat_template.json")


class ChatEncoder:
    """The template and the tokenizer.json it renders for, loaded in the writing process and
    carried to each worker (a local fork, or Ray's object store)."""

    def __init__(self, tokenizer_path: Path, template_file: Path | None) -> None:
        try:
            from transformers import PreTrainedTokenizerFast
        except ImportError:
            raise ArgumentError("chat JSONL needs transformers for its chat template (pip "
                                "install 'datapipe[sft]')") from None
        config = _json_object(tokenizer_path.parent / "tokenizer_config.json")
        template = _read_template(template_file) if template_file else _saved_template(
            tokenizer_path.parent, config)
        if not template:
            raise ArgumentError(f"--tokenizer {tokenizer_path}: no chat template beside it "
                                f"(none of {', '.join(_SIDE_FILES)} holds one); pass "
                                "--chat-template FILE")
        tokens = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token", "pad_token")}
        self._tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_path),
                                            chat_template=template,
                                            **{k: v for k, v in tokens.items() if v})
        self.template_hash = hash_bytes(template.encode())
        self.marks_generation = bool(_GENERATION.search(template))

    def token_id(self, token: str) -> int | None:
        """The id of a token the tokenizer knows whole (a special token), else None."""
        found = self._tok.convert_tokens_to_ids(token)
        return None if found is None or found == self._tok.unk_token_id else int(found)

    def encode(self, chat: Chat) -> tuple[np.ndarray, np.ndarray] | str:
        """(ids, 1 on each assistant token) of a conversation, or why it is a reject."""
        messages = list(chat.messages)
        try:
            if self.marks_generation:
                out = self._tok.apply_chat_template(
                    messages, tokenize=True, return_dict=True,
                    return_assistant_tokens_mask=True)
                return (np.asarray(out["input_ids"], np.uint32),
                        np.asarray(out["assistant_masks"], np.uint8))
            return self._encode_by_prefixes(messages)
        except Exception as exc:  # jinja's raise_exception(), a template error
            return f"chat template: {str(exc).strip().splitlines()[0] if str(exc) else exc!r}"

    def _encode_by_prefixes(self, messages: list[dict[str, str]]) -> \
            tuple[np.ndarray, np.ndarray] | str:
        text = self._render(messages, False)
        spans = []
        for turn, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = self._render(messages[:turn], True)
            through = self._render(messages[:turn + 1], False)
            if not (text.startswith(through) and through.startswith(before)):
                return (f"chat template renders turn {turn + 1} differently once later turns "
                        "follow, so its tokens cannot be told apart; use a template with "
                        "{% generation %} markers (--chat-template FILE)")
            spans.append((len(before), len(through)))
        encoded = self._tok(text, add_special_tokens=False, return_offsets_mapping=True)
        starts = np.asarray([start for start, _ in encoded["offset_mapping"]], np.int64)
        mask = np.zeros(len(starts), np.uint8)
        for first, stop in spans:
            mask[(starts >= first) & (starts < stop)] = 1
        return np.asarray(encoded["input_ids"], np.uint32), mask

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        if not messages:
            return ""
        return self._tok.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=generation_prompt)


def _saved_template(folder: Path, config: dict[str, Any]) -> str | None:
    """The template saved beside the tokenizer, as transformers saves one: in
    chat_template.jinja, chat_template.json or tokenizer_config.json (a string, or a list of
    named templates of which "default" is the one)."""
    if (folder / "chat_template.jinja").is_file():
        return _read_template(folder / "chat_template.jinja")
    saved = config.get("chat_template")
    if saved is None:
        saved = _json_object(folder / "chat_template.json").get("chat_template")
    if isinstance(saved, list):
        saved = next((t.get("template") for t in saved
                      if isinstance(t, dict) and t.get("name") == "default"), None)
    return saved if isinstance(saved, str) else None


def _json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _read_template(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"--chat-template {path}: unreadable ({exc})") from None


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json holds it: a string, or an AddedToken's dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
