"""Supervised fine-tuning records into ids and a loss mask (1: the loss counts this token).

Prompt/completion: the prompt's ids then the completion's, each encoded alone so that no token
straddles the boundary; the mask is 0 on the prompt, 1 on the completion. Chat: the template's
rendering, the mask 1 on the assistant's tokens (chat_template.py). A record with nothing for
the loss to count is a reject, never a document that trains on nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from preprocess.chat_template import ChatEncoder
from preprocess.sft_records import Chat, PromptCompletion
from preprocess.text_sources import BadDocument
from preprocess.tokenizers import TextTokenizer

# (ids, mask) of a kept record, or a reject's reason (None: an empty document)
Encoded = tuple[np.ndarray, np.ndarray | None] | str | None


def encode_records(tokenizer: TextTokenizer, chat: ChatEncoder | None,
                   records: Sequence[object], loss_mask: str | None) -> list[Encoded]:
    """Each record's outcome; `records` hold Chat, PromptCompletion or BadDocument."""
    records = [r.reason if isinstance(r, BadDocument) else r for r in records]
    if chat is not None:
        outcomes = [chat.encode(r) if isinstance(r, Chat) else r for r in records]
    else:
        outcomes = _prompt_completions(tokenizer, records)
    return [_judge(outcome, loss_mask) for outcome in outcomes]


def _prompt_completions(tokenizer: TextTokenizer,
                        records: Sequence[object]) -> list[object]:
    pairs = [r for r in records if isinstance(r, PromptCompletion)]
    prompts = iter(tokenizer.encode_batch([p.prompt for p in pairs]))
    completions = iter(tokenizer.encode_batch([p.completion for p in pairs]))
    outcomes: list[object] = []
    for record in records:
        if not isinstance(record, PromptCompletion):
            outcomes.append(record)
            continue
        prompt, completion = next(prompts), next(completions)
        if isinstance(prompt, str) or isinstance(completion, str):  # too long to tokenize
            outcomes.append(prompt if isinstance(prompt, str) else completion)
            continue
        mask = np.zeros(len(prompt) + len(completion), np.uint8)
        mask[len(prompt):] = 1
        outcomes.append((np.concatenate([prompt, completion]), mask))
    return outcomes


def _judge(outcome: object, loss_mask: str | None) -> Encoded:
    """A reason stays one; ids with nothing to learn from become one."""
    if not isinstance(outcome, tuple):
        return outcome  # a reason
    ids, mask = outcome
    if not len(ids):
        return None
    if loss_mask is None:
        return ids, None
    if not mask.any():
        return f"no {loss_mask} tokens (an empty {loss_mask}): nothing for the loss to count"
    return ids, mask
