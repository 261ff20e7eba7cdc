"""The reproduction of upstream issue #25020, runnable in any environment that has torch and transformers.

Assisted generation must return exactly what greedy search returns. v4.31.0 drops every model input but the
input ids, the attention mask and the cache when it calls the models, so a GPT-2 prompt with `token_type_ids`
(and left padding) gives a different continuation with an assistant. Exit status 0 when they agree, 1 otherwise.
"""

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def tiny_gpt2(seed: int) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    # Larger weights than the default initialization: the output then depends on the whole context.
    config = GPT2Config(
        vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4, initializer_range=0.5, pad_token_id=0
    )
    return GPT2LMHeadModel(config).eval()


def main() -> int:
    model, assistant = tiny_gpt2(0), tiny_gpt2(1)
    input_ids = torch.tensor([[0, 0, 17, 42, 5, 63, 21, 8]])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])
    token_type_ids = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    kwargs = dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        token_type_ids=token_type_ids,
        max_new_tokens=12,
        do_sample=False,
        pad_token_id=0,
    )
    with torch.no_grad():
        greedy = model.generate(**kwargs)
        assisted = model.generate(**kwargs, assistant_model=assistant)
    print(f"greedy:   {greedy.tolist()}")
    print(f"assisted: {assisted.tolist()}")
    same = torch.equal(greedy, assisted)
    print("assisted == greedy" if same else "assisted != greedy (issue #25020)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
