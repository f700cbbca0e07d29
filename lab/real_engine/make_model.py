"""Write a tiny model directory that real vLLM serves with `--load-format dummy`.

Run by the real engine's own Python (it has `tokenizers`): no hub, no download. The weights are
random (dummy loader); what matters is a standard architecture vLLM knows, a real tokenizer
trained here, and a chat template, so the server, the API and the token counts are real.

    <venv>/bin/python make_model.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB_SIZE = 2048
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": VOCAB_SIZE,  # set to the trained tokenizer's size
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,  # <|endoftext|>: the special tokens come first
    "eos_token_id": 2,  # <|im_end|>
}

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Any plain English will do: the tokenizer only has to cover bytes and common words.
CORPUS = """
Two machines share one model: each holds half of the weights and they exchange activations
over a fast link. The server loads the model, sizes its cache, warms up and answers requests.
The quick brown fox jumps over the lazy dog, and then it runs back across the field to the
old barn where the farmer keeps the hay. Every morning the sun rises over the hills, the birds
start to sing, and the day begins again with the same quiet rhythm. Tell me a short story
about a robot who learns to paint. What is the capital of France? Explain tensor parallelism
in one paragraph. Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000, punctuation . , ; : ! ? ( ) [ ] { }.
"""


def train_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator([CORPUS] * 8, trainer=trainer)
    return tokenizer


def write_model(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    tokenizer.save(str(out / "tokenizer.json"))
    # Every id the model can sample must decode: the embedding is as large as the vocabulary.
    config = dict(CONFIG, vocab_size=tokenizer.get_vocab_size())
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|endoftext|>",
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "unk_token": None,
                "model_max_length": CONFIG["max_position_embeddings"],
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
        )
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "bos_token": "<|endoftext|>",
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
            },
            indent=2,
        )
    )
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps(
            {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]},
            indent=2,
        )
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_model.py OUT_DIR")
    write_model(Path(sys.argv[1]))
