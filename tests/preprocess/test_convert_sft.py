"""`convert text` on supervised fine-tuning JSONL: chat and prompt/completion records are stored
with a per-token loss_mask (1 on the tokens the loss counts), bad records are rejects naming
file and line, and a mistake of schema or tokenizer is one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from datapipe.format import Dataset

# A ChatML-like template whose assistant text is marked for return_assistant_tokens_mask.
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|im_end|>"
    "{% endgeneration %}{% else %}{{ m['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
UNMARKED = TEMPLATE.replace("{% generation %}", "").replace("{% endgeneration %}", "")

CHATS = [
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"},
     {"role": "assistant", "content": "hi"}, {"role": "user", "content": "what is two plus two"},
     {"role": "assistant", "content": "four, I think"}],
    [{"role": "user", "content": "héllo wörld ✓"}, {"role": "assistant", "content": "✓ noted"}],
    [{"role": "developer", "content": "use the tool"}, {"role": "user", "content": "weather?"},
     {"role": "assistant", "content": "calling"}, {"role": "tool", "content": "sunny"},
     {"role": "assistant", "content": "It is sunny."}],
]


def make_chat_tokenizer(folder: Path) -> Path:
    """A tiny byte-level BPE saved in `folder` as transformers saves a tokenizer:
    tokenizer.json beside a tokenizer_config.json holding the chat template and special
    tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [m["content"] for chat in CHATS for m in chat] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATE,
        "bos_token": "<s>", "eos_token": "<|im_end|>"}))
    return folder


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_chat_tokenizer(tmp_path_factory.mktemp("chat_tokenizer"))


def _write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def _rows(out: Path) -> list[tuple[list[int], list[int]]]:
    with Dataset(out) as ds:
        return [(ds[i]["tokens"].tolist(), ds[i]["loss_mask"].tolist()) for i in range(len(ds))]


def _rejects(out: Path) -> dict[str, str]:
    lines = (out / "rejects.jsonl").read_text().splitlines()
    return {r["source"]: r["reason"] for r in map(json.loads, lines)}


def _expected_chats(tokenizer: Path) -> list[tuple[list[int], list[int]]]:
    """What transformers itself gives, the tokenizer loaded as a trainer loads it."""
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(tokenizer))
    expected = []
    for chat in CHATS:
        out = tok.apply_chat_template(chat, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        expected.append((list(out["input_ids"]), list(out["assistant_masks"])))
    return expected


def test_chat_mask_is_exactly_the_assistant_tokens_of_the_chat_template(
        cli, tmp_path: Path, chat_tokenizer: Path) -> None:
    expected = _expected_chats(chat_tokenizer)
    src = _write_jsonl(tmp_path / "chat.jsonl", [{"messages": c} for c in CHATS])
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", chat_tokenizer,
                 "--workers", "2")
    assert result.code == 0, result.err
    assert _rows(tmp_path / "out") == expected
    assert all(0 < sum(mask) < len(mask) for _, mask in expected)
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.column("loss_mask").type == "uint8[]"
        settings = ds.manifest.settings
        assert (settings["text_kind"], settings["loss_mask"]) == ("chat", "assistant")
        assert ds.manifest.tokenizer["kind"] == "hf"


def test_a_template_without_generation_marks_gets_the_same_mask_from_rendered_prefixes(
        cli, tmp_path: Path, chat_tokenizer: Path) -> None:
    expected = _expected_chats(chat_tokenizer)
    (tmp_path / "unmarked.jinja").write_text(UNMARKED)
    src = _write_jsonl(tmp_path / "chat.jsonl", [{"messages": c} for c in CHATS])
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", chat_tokenizer,
                 "--chat-template", tmp_path / "unmarked.jinja", "--workers", "1")
    assert result.code == 0, result.err
    assert _rows(tmp_path / "out") == expected


def test_prompt_completion_masks_the_prompt(cli, tmp_path: Path) -> None:
    records = [{"q": "2+2=", "a": " 4"}, {"q": "héllo ", "a": "wörld", "id": 7}]
    src = _write_jsonl(tmp_path / "pc.jsonl", records)
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", "bytes",
                 "--prompt-field", "q", "--completion-field", "a", "--append-eos")
    assert result.code == 0, result.err
    expected = []
    for r in records:
        prompt, completion = list(r["q"].encode()), list(r["a"].encode())
        expected.append((prompt + completion + [256],
                         [0] * len(prompt) + [1] * (len(completion) + 1)))
    assert _rows(tmp_path / "out") == expected
    with Dataset(tmp_path / "out") as ds:
        assert ds.manifest.settings["loss_mask"] == "completion"


def test_loss_on_all_stores_no_mask(cli, tmp_path: Path) -> None:
    src = _write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "a", "completion": "b"}])
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", "bytes",
                 "--loss-on", "all")
    assert result.code == 0, result.err
    with Dataset(tmp_path / "out") as ds:
        assert [c.name for c in ds.manifest.columns] == ["tokens", "length"]
        assert (ds.manifest.settings["loss_on"], ds.manifest.settings["loss_mask"]) == \
            ("all", None)
        assert ds[0]["tokens"].tolist() == [ord("a"), ord("b")]


def test_bad_chat_records_are_rejects_naming_file_and_line(cli, tmp_path: Path,
                                                           chat_tokenizer: Path) -> None:
    pytest.importorskip("transformers")
    records = [{"messages": CHATS[1]},
               {"messages": [{"role": "user", "content": "anyone?"}]},
               {"messages": [{"role": "bot", "content": "hi"}, *CHATS[1]]},
               {"messages": [{"role": "user", "content": None}, *CHATS[1][1:]]},
               {"messages": "hello"},
               {"messages": CHATS[0]}]
    src = _write_jsonl(tmp_path / "chat.jsonl", records)
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", chat_tokenizer)
    assert result.code == 0, result.err
    assert "converted 2 documents of 6 inputs (4 rejected" in result.out
    assert _rejects(tmp_path / "out") == {
        f"{src}:2": "chat.jsonl line 2: no assistant turn (nothing for the loss to count)",
        f"{src}:3": "chat.jsonl line 3: message 1: unknown role 'bot' (roles: system, "
                    "developer, user, assistant, tool)",
        f"{src}:4": "chat.jsonl line 4: message 1: content is null, not a string",
        f"{src}:5": "chat.jsonl line 5: field 'messages' is a string, not an array"}


def test_a_conversation_the_template_refuses_is_a_reject_with_its_words(
        cli, tmp_path: Path, chat_tokenizer: Path) -> None:
    pytest.importorskip("transformers")
    refusing = "{% if messages[0]['role'] == 'tool' %}" \
        "{{ raise_exception('a conversation cannot open with a tool') }}{% endif %}" + TEMPLATE
    (tmp_path / "t.jinja").write_text(refusing)
    src = _write_jsonl(tmp_path / "chat.jsonl", [{"messages": CHATS[1]}, {"messages": [
        {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "ok"}]}])
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", chat_tokenizer,
                 "--chat-template", tmp_path / "t.jinja")
    assert result.code == 0, result.err
    assert _rejects(tmp_path / "out") == {
        f"{src}:2": "chat.jsonl line 2: chat template: 'a conversation cannot open with a "
                    "tool'"}


def test_bad_prompt_completion_records_are_rejects(cli, tmp_path: Path) -> None:
    records = [{"prompt": "p", "completion": "c"}, {"prompt": "p"},
               {"prompt": [{"role": "user", "content": "p"}], "completion": "c"}, [1]]
    src = _write_jsonl(tmp_path / "pc.jsonl", records)
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", "bytes")
    assert result.code == 0, result.err
    assert _rejects(tmp_path / "out") == {
        f"{src}:2": "pc.jsonl line 2: no field 'completion'",
        f"{src}:3": "pc.jsonl line 3: field 'prompt' is an array, not a string (write a "
                    "conversation as messages)",
        f"{src}:4": "pc.jsonl line 4: not a JSON object but an array"}


@pytest.mark.parametrize("case, message", [
    ("no-template", "no chat template beside it"),
    ("bytes", "--tokenizer bytes has no chat template"),
    ("loss-on", "--loss-on completion: chat text takes all or assistant"),
    ("loss-on-plain", "--loss-on applies to prompt-completion and chat JSONL only"),
    ("mixed", "SRC mixes chat"),
    ("kind-txt", "--text-kind chat: "),
    ("first-record", "chat.jsonl: the first record has no field 'prompt' (check --prompt-field"),
    ("template-plain", "--chat-template applies to chat JSONL only"),
])
def test_schema_and_tokenizer_mistakes_are_one_line_before_any_work(
        cli, tmp_path: Path, chat_tokenizer: Path, case: str, message: str) -> None:
    if case == "no-template":
        pytest.importorskip("transformers")
    chat = _write_jsonl(tmp_path / "chat.jsonl", [{"messages": CHATS[1]}])
    pc = _write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "p", "completion": "c"}])
    (tmp_path / "plain.txt").write_text("plain\n")
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    args = {
        "no-template": [chat, "--tokenizer", chat_tokenizer / "tokenizer.json"],
        "bytes": [chat, "--tokenizer", "bytes"],
        "loss-on": [chat, "--tokenizer", chat_tokenizer, "--loss-on", "completion"],
        "loss-on-plain": [tmp_path / "plain.txt", "--tokenizer", "bytes", "--loss-on", "all"],
        "mixed": [chat, pc, "--tokenizer", chat_tokenizer],
        "kind-txt": [tmp_path / "plain.txt", "--tokenizer", "bytes", "--text-kind", "chat"],
        "first-record": [chat, "--tokenizer", "bytes", "--text-kind", "prompt-completion"],
        "template-plain": [pc, "--tokenizer", "bytes", "--chat-template", tmp_path / "t.jinja"],
    }[case]
    if case == "no-template":  # the tokenizer.json alone, without its config beside it
        lone = tmp_path / "lone"
        lone.mkdir()
        (lone / "tokenizer.json").write_bytes((chat_tokenizer / "tokenizer.json").read_bytes())
        args[2] = lone / "tokenizer.json"
    result = cli("convert", "text", *args, tmp_path / "out")
    assert result.code != 0
    assert message in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert not (tmp_path / "out").exists()
    if case == "no-template":
        assert "--chat-template FILE" in result.err


def test_plain_text_is_stored_as_before_without_a_loss_mask(cli, tmp_path: Path) -> None:
    """Plain text's columns and settings are those a conversion always wrote, so its shards
    and manifest are unchanged; a .jsonl of plain records is plain whatever else it holds."""
    src = _write_jsonl(tmp_path / "docs.jsonl", [{"text": "one", "prompt": "p"},
                                                 {"text": "two"}])
    result = cli("convert", "text", src, tmp_path / "out", "--tokenizer", "bytes")
    assert result.code == 0, result.err
    with Dataset(tmp_path / "out") as ds:
        assert [c.to_json() for c in ds.manifest.columns] == [
            {"name": "tokens", "type": "tokens:uint16"}, {"name": "length", "type": "int32"}]
        assert list(ds.manifest.settings) == ["field", "doc_per_file", "append_eos",
                                              "shard_size"]
        assert [ds[i]["tokens"].tolist() for i in range(2)] == [list(b"one"), list(b"two")]


def test_a_fine_tuning_dataset_reads_back_through_the_token_loader(cli, tmp_path: Path) -> None:
    """The stored mask reaches the labels: through the "hf" preset, the targets that count are
    exactly the completion's bytes, and num_loss_tokens counts them."""
    import datapipe as dp

    records = [{"prompt": f"q{i} ", "completion": f"answer {i}"} for i in range(20)]
    src = _write_jsonl(tmp_path / "pc.jsonl", records)
    assert cli("convert", "text", src, tmp_path / "out", "--tokenizer", "bytes").code == 0
    real = counted = 0
    targets: list[int] = []
    with dp.TokenLoader(tmp_path / "out", max_tokens=64, num_workers=2, shuffle=False,
                        preset="hf") as loader:
        for batch in loader:
            real += int(batch["num_real_tokens"])
            counted += int(batch["num_loss_tokens"])
            labels = batch["labels"].flatten()
            targets += labels[labels != -100].tolist()
    assert real == sum(len(r["prompt"]) + len(r["completion"]) for r in records)
    assert bytes(targets) == b"".join(r["completion"].encode() for r in records)
    assert counted == len(targets)


def test_each_documents_size_counts_its_loss_mask(chat_tokenizer: Path) -> None:
    """Workers size each document for the shard cut; the writer's own sum must agree."""
    pytest.importorskip("transformers")
    from datapipe.format.schema import Column
    from datapipe.format.writer import rows_nbytes
    from preprocess.chat_template import ChatEncoder
    from preprocess.sft_records import Chat
    from preprocess.text import TokenWork, tokenize_batch
    from preprocess.text_sources import TextOptions
    from preprocess.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(str(chat_tokenizer))
    work = TokenWork(tokenizer, np.dtype(np.uint16), tokenizer.eos_id, (),
                     TextOptions(kind="chat"), ChatEncoder(tokenizer.path, None))
    batch = tokenize_batch(work, [(i, Chat(tuple(c))) for i, c in enumerate(CHATS)])
    cuts = np.cumsum(batch.lengths)[:-1]
    columns = (Column("tokens", "tokens:uint16"), Column("length", "int32"),
               Column("loss_mask", "uint8[]"))
    rows = {"tokens": np.split(batch.ids, cuts), "length": batch.lengths,
            "loss_mask": np.split(batch.mask, cuts)}
    assert batch.sizes == rows_nbytes(columns, rows)
    assert [m[-1] for m in rows["loss_mask"]] == [1] * len(CHATS)  # EOS counts


@pytest.mark.slow
def test_a_killed_fine_tuning_run_resumes_mid_span_to_identical_output(tmp_path: Path) -> None:
    """The rerun starts at a span and leaves out the documents already in OUT: their masks
    with their ids."""
    from tests.integration.test_kill_resume import killed_and_resumed_matches_clean

    records = [{"prompt": f"question {i}: " + "why " * (i % 7), "completion": f"because {i}"}
               for i in range(60_000)]
    src = _write_jsonl(tmp_path / "pc.jsonl", records)
    args = ["convert", "text", str(src), "OUT", "--tokenizer", "bytes", "--shard-size", "64KB",
            "--workers", "2"]
    out = killed_and_resumed_matches_clean(tmp_path, args)
    with Dataset(out) as ds:
        assert len(ds) == len(records)
        last = ds[len(ds) - 1]
        completion = records[-1]["completion"]
        assert last["loss_mask"].tolist() == [0] * (last["length"] - len(completion)) + \
            [1] * len(completion)
