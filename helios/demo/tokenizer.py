"""The demo tokenizer (host side): byte-level BPE trained on the demo corpus with `tokenizers`.

The pipeline follows the Qwen2 family: NFC normalization, a split regex that isolates every digit
(so numbers are digit sequences, which arithmetic needs) and every capital not starting a word,
byte-level BPE, byte-level decoding. The
chat markers are single tokens: `<|endoftext|>` (padding), `<|im_start|>`, `<|im_end|>` (EOS) are
special; `<think>`, `</think>`, `<tool_call>`, `</tool_call>` are added tokens that decoding keeps.
`write_tokenizer_files` writes `tokenizer.json`, `tokenizer_config.json` (with the chat template)
and `chat_template.jinja` into a checkpoint directory.

Run `python -m helios.demo.tokenizer --help` to train it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

from helios.demo import CHECKPOINT_DIR, TEMPLATE_PATH
from helios.demo.corpus import TRAIN_SEED, training_texts
from helios.errors import HeliosError

PAD_TOKEN = "<|endoftext|>"
START_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, START_TOKEN, EOS_TOKEN)  # ids 0, 1, 2
MARKUP_TOKENS: tuple[str, ...] = ("<think>", "</think>", "<tool_call>", "</tool_call>")  # the last ids
VOCAB_SIZE = 3072  # at most: BPE vocabulary plus the four markup tokens (the demo corpus fills all of it)
TOKENIZER_EXAMPLES = 20000  # corpus examples the BPE merges are learned from
MODEL_MAX_LENGTH = 1024

# The Qwen2 pre-tokenization pattern with two changes. A word is at most one capital followed by
# small letters, and any other capital stands alone ("Paris" stays whole, "JSON" is J S O N);
# digits are single too. Strings of capitals then tokenize letter by letter wherever they appear,
# which copying and reversing need. And a word carries no punctuation before it except the joints
# of identifiers (`_`, `-`, `.`) and the `<` of markup tags: the Qwen2 pattern glues any one such
# character to the next word, so a tool name was `>fetch _local` in the schema's
# `<name>fetch_local` and `=fetch _local` in the call's `<function=fetch_local`: different tokens,
# which a small model cannot copy from one to the other. Here both are `fetch _local`, after a
# lone `>` or `=`.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[ _\-.<]?\p{Lu}?\p{Ll}+|\p{L}|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


class TokenizerTrainingError(HeliosError):
    """The trained tokenizer lacks a required single-token marker or has the wrong size."""


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Learn byte-level BPE merges on `texts`; deterministic for the same texts."""
    tokenizer = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = BpeTrainer(
        vocab_size=vocab_size - len(MARKUP_TOKENS),
        min_frequency=2,
        show_progress=False,
        special_tokens=[AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in MARKUP_TOKENS])
    for token in (*SPECIAL_TOKENS, *MARKUP_TOKENS):
        ids = tokenizer.encode(token).ids
        if len(ids) != 1 or tokenizer.token_to_id(token) != ids[0]:
            raise TokenizerTrainingError(f"{token} must encode as one token, got ids {ids}")
    return tokenizer


def tokenizer_config(tokenizer: Tokenizer, chat_template: str) -> dict[str, object]:
    """The Hugging Face `tokenizer_config.json` for `tokenizer`, chat template included."""
    decoder = {}
    for token in (*SPECIAL_TOKENS, *MARKUP_TOKENS):
        decoder[str(tokenizer.token_to_id(token))] = {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": token in SPECIAL_TOKENS,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH,
        "pad_token": PAD_TOKEN,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def write_tokenizer_files(tokenizer: Tokenizer, out_dir: Path, template_path: Path = TEMPLATE_PATH) -> None:
    """Write tokenizer.json, tokenizer_config.json and chat_template.jinja into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    chat_template = template_path.read_text(encoding="utf-8")
    tokenizer.save(str(out_dir / "tokenizer.json"), pretty=False)
    config = tokenizer_config(tokenizer, chat_template)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out_dir / "chat_template.jinja").write_text(chat_template, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helios.demo.tokenizer",
        description=(
            "Train the demo's byte-level BPE tokenizer on the demo corpus and write tokenizer.json, "
            "tokenizer_config.json (with the chat template) and chat_template.jinja. The committed "
            "checkpoint's tokenizer was made with the defaults."
        ),
    )
    parser.add_argument("--out", type=Path, default=CHECKPOINT_DIR, help="output directory (default: the committed checkpoint)")
    parser.add_argument("--seed", type=int, default=TRAIN_SEED, help="corpus seed (default %(default)s)")
    parser.add_argument("--examples", type=int, default=TOKENIZER_EXAMPLES,
                        help="corpus examples to learn merges from (default %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE, help="total vocabulary size (default %(default)s)")
    args = parser.parse_args(argv)
    tokenizer = train_tokenizer(training_texts(args.seed, 0, args.examples), args.vocab_size)
    write_tokenizer_files(tokenizer, args.out)
    print(f"wrote a {tokenizer.get_vocab_size()}-token tokenizer to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
