"""Assisted generation on the real checkpoints of `make real-models`: SmolLM2 with a draft of its own first layers,
Whisper base with drafts of its own first decoder layers, alone and in the speech recognition pipeline.

Every test skips, with the reason in capitals, when build/real-models/ holds no complete build (`support.real_models`).

The drafts are cut from the checkpoints themselves (no other weights are needed): their first layers, under the
model's final norm and head. They agree with the model now and then, which is what makes the checks below prove
something: candidates are drafted, some accepted, most rejected, on real text and speech.

Contract (greedy decoding, float32):
- SmolLM2-135M-Instruct with a `LlamaForCausalLM` of its first `SMOLLM2_DRAFT_LAYERS` layers: `generate` with the draft
  returns the tokens of `generate` without it, for real prompts (plain text, ChatML chats) one at a time and as one
  left-padded batch of three of different lengths (whose oracle is greedy search of the same padded batch), with the
  draft length of the draft's generation config (the adaptive schedule) and with four candidates in every round. With
  four candidates, the model accepts some of them over the prompts.
- Whisper base with a draft of its first two decoder layers, in two shapes: a `WhisperForConditionalGeneration` that
  shares the model's encoder (distil-whisper's shape) and a decoder-only `WhisperForCausalLM` that reads the model's
  encoder outputs. `pipeline("automatic-speech-recognition", generate_kwargs={"assistant_model": ...})` gives the
  tokens, and the pinned transcripts, of the pipeline without an assistant, at batch sizes 1 and 2. `generate` on the
  input features of a clip gives greedy's tokens with either draft, and the two drafts, being one computation, draft
  and get accepted alike.
- Prompt lookup (`prompt_lookup_num_tokens=4`) on SmolLM2 returns greedy's tokens for the same prompts, alone and as
  the padded batch, and the model accepts looked-up candidates where the prompt asks to repeat a sentence.
- the output's `assisted_decoding_stats` count the rounds: each adds the candidates the model accepted and one token
  of the model's own, so the rounds and the accepted candidates add up to the new tokens.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import (
    AutoTokenizer,
    LlamaForCausalLM,
    WhisperForConditionalGeneration,
    WhisperProcessor,
    pipeline,
)
from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions
from transformers.models.whisper.modeling_whisper import WhisperDecoder, WhisperPreTrainedModel

from integration._common import assert_same_tokens
from support.device import DEVICE
from support.real_models import RealModels, real_models_or_skip

real_models = pytest.mark.real_models

# Four candidates in every round: candidates are surely drafted and verified.
FOUR_CANDIDATES = {"num_assistant_tokens": 4, "num_assistant_tokens_schedule": "constant"}

SMOLLM2_DRAFT_LAYERS = 8  # of 30
SMOLLM2_NEW_TOKENS = 16


def chat(message: str) -> str:
    """A user message in SmolLM2-Instruct's chat format (ChatML, without the default system prompt)."""
    return f"<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n"


CODE = "def total(values):\n    x = 0\n    for value in values:\n        x += value\n    return x"
PROMPTS = {
    "plain": "The capital of France is",
    "repeat": chat("Repeat this sentence exactly: The quick brown fox jumps over the lazy dog."),
    "rename": chat(f"Rename the variable x to count in this code:\n{CODE}"),
    "question": chat("What is the capital of France?"),
}
SINGLE_PROMPTS = ("plain", "repeat", "rename")
BATCH_PROMPTS = ("plain", "question", "rename")  # 5, 16 and 44 tokens

WHISPER_DRAFT_LAYERS = 2  # of 6
WHISPER_NEW_TOKENS = 40
GOFORWARD = "goforward.raw"
AMIABLE = "sense_and_sensibility_01_austen_64kb-0930.wav"
CLIPS = (GOFORWARD, AMIABLE)
# What the pipeline transcribes (greedy, Whisper base), with an assistant or without.
PIPELINE_TRANSCRIPTS = {
    GOFORWARD: " Go forward 10 meters.",
    AMIABLE: " He might even have been made amiable himself.",
}


@pytest.fixture(scope="module")
def real() -> RealModels:
    return real_models_or_skip()


def assert_counts_rounds(stats, new_tokens: int, what: str, rows_keep_their_own=False):
    """The stats of an assisted call exist and count its rounds: each round adds its accepted candidates and one token
    of the model's own to every row. Where the rows of a batch keep their own candidates, a round counts those of one
    row, and the longest row may have kept more or fewer."""
    assert stats is not None, f"no assisted_decoding_stats {what}"
    assert stats.num_rounds > 0, f"no round counted {what}: {stats}"
    assert 0 <= stats.num_accepted <= stats.num_drafted, f"{what}: {stats}"
    counted = stats.num_rounds + stats.num_accepted
    message = (
        f"{what}: {stats.num_rounds} rounds and {stats.num_accepted} accepted candidates for {new_tokens} new tokens"
    )
    if rows_keep_their_own:
        assert stats.num_rounds <= new_tokens, message
    else:
        assert counted == new_tokens, message


# SmolLM2-135M-Instruct and the draft of its first layers.


@pytest.fixture(scope="module")
def smollm2(real):
    """(left-padding tokenizer, model, draft): the draft is a `LlamaForCausalLM` of the model's embeddings, its first
    `SMOLLM2_DRAFT_LAYERS` layers, its final norm and its (tied) head."""
    tokenizer = AutoTokenizer.from_pretrained(real.smollm2, padding_side="left")
    model = LlamaForCausalLM.from_pretrained(real.smollm2, low_cpu_mem_usage=True).to(DEVICE).eval()
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = SMOLLM2_DRAFT_LAYERS
    draft = LlamaForCausalLM(config).eval()
    weights = model.state_dict()
    draft.load_state_dict({name: weights[name] for name in draft.state_dict()}, strict=True)
    draft.to(DEVICE)
    assert draft.lm_head.weight.data_ptr() == draft.model.embed_tokens.weight.data_ptr()
    assert torch.equal(
        draft.model.layers[-1].mlp.down_proj.weight, model.model.layers[SMOLLM2_DRAFT_LAYERS - 1].mlp.down_proj.weight
    )
    return tokenizer, model, draft


_SMOLLM2_GREEDY: dict[tuple[str, ...], torch.Tensor] = {}


def smollm2_greedy(smollm2, names: tuple[str, ...]):
    """(inputs, greedy tokens) of the prompts `names`, as one left-padded batch, computed once per process."""
    tokenizer, model, _ = smollm2
    inputs = tokenizer([PROMPTS[name] for name in names], return_tensors="pt", padding=True).to(DEVICE)
    if names not in _SMOLLM2_GREEDY:
        with torch.no_grad():
            _SMOLLM2_GREEDY[names] = model.generate(**inputs, max_new_tokens=SMOLLM2_NEW_TOKENS, do_sample=False)
    return inputs, _SMOLLM2_GREEDY[names]


def smollm2_assisted(smollm2, inputs, **settings):
    _, model, draft = smollm2
    with torch.no_grad():
        output = model.generate(
            **inputs,
            max_new_tokens=SMOLLM2_NEW_TOKENS,
            do_sample=False,
            assistant_model=draft,
            return_dict_in_generate=True,
            **settings,
        )
    return output.sequences, output.assisted_decoding_stats


@real_models
@pytest.mark.parametrize("schedule", ["default", "four-candidates"])
def test_smollm2_assisted_equals_greedy(smollm2, schedule):
    """One prompt at a time: the draft's own schedule (adaptive), and four candidates in every round, of which the
    model accepts some over the prompts."""
    settings = FOUR_CANDIDATES if schedule == "four-candidates" else {}
    stats_by_prompt = {}
    for name in SINGLE_PROMPTS:
        inputs, greedy = smollm2_greedy(smollm2, (name,))
        assisted, stats = smollm2_assisted(smollm2, inputs, **settings)
        what = f"(SmolLM2, {name!r} prompt, {schedule} schedule)"
        assert_same_tokens(greedy, assisted, what)
        assert_counts_rounds(stats, greedy.shape[1] - inputs.input_ids.shape[1], what)
        stats_by_prompt[name] = stats
    if schedule == "four-candidates":
        assert all(stats.num_drafted > 0 for stats in stats_by_prompt.values()), stats_by_prompt
        accepted = sum(stats.num_accepted for stats in stats_by_prompt.values())
        assert accepted > 0, f"the model accepted none of the draft's candidates on any prompt: {stats_by_prompt}"


@real_models
def test_smollm2_assisted_equals_greedy_in_a_padded_batch(smollm2):
    """A left-padded batch of three prompts of different lengths, row by row against greedy search of that batch."""
    inputs, greedy = smollm2_greedy(smollm2, BATCH_PROMPTS)
    mask = inputs.attention_mask
    assert len(set(mask.sum(dim=1).tolist())) == 3 and not bool(mask[:, 0].all()), "the batch is not left-padded"
    new_tokens = greedy.shape[1] - inputs.input_ids.shape[1]
    for schedule, settings in (("default", {}), ("four-candidates", FOUR_CANDIDATES)):
        assisted, stats = smollm2_assisted(smollm2, inputs, **settings)
        assert greedy.shape == assisted.shape, f"{schedule}: {tuple(greedy.shape)} != {tuple(assisted.shape)}"
        for row, name in enumerate(BATCH_PROMPTS):
            assert_same_tokens(
                greedy[row], assisted[row], f"(SmolLM2, batch row {row}: {name!r}, {schedule} schedule)"
            )
        assert_counts_rounds(
            stats, new_tokens, f"(SmolLM2, padded batch, {schedule} schedule)", rows_keep_their_own=True
        )
        if schedule == "four-candidates":
            assert stats.num_drafted > 0, stats


@real_models
def test_smollm2_prompt_lookup_equals_greedy(smollm2):
    """Prompt lookup, one prompt at a time and as the left-padded batch: the tokens of greedy search, and on the
    prompt that asks to repeat a sentence, candidates looked up in the prompt are accepted."""
    _, model, _ = smollm2
    for names in [(name,) for name in SINGLE_PROMPTS] + [BATCH_PROMPTS]:
        inputs, greedy = smollm2_greedy(smollm2, names)
        with torch.no_grad():
            output = model.generate(
                **inputs,
                max_new_tokens=SMOLLM2_NEW_TOKENS,
                do_sample=False,
                prompt_lookup_num_tokens=4,
                return_dict_in_generate=True,
            )
        lookup, stats = output.sequences, output.assisted_decoding_stats
        what = f"(SmolLM2, prompt lookup, prompts {names})"
        assert greedy.shape == lookup.shape, f"{what}: {tuple(greedy.shape)} != {tuple(lookup.shape)}"
        for row in range(greedy.shape[0]):
            assert_same_tokens(greedy[row], lookup[row], f"{what}, row {row}")
        assert_counts_rounds(stats, greedy.shape[1] - inputs.input_ids.shape[1], what)
        if names == ("repeat",):
            assert stats.num_accepted > 0, f"{what}: no looked-up candidate accepted: {stats}"


# Whisper base and the drafts of its first decoder layers.


class _WhisperDecoderOnly(WhisperPreTrainedModel):
    """Holds the decoder, so that the weights of `WhisperForCausalLM` are named as the model's (`model.decoder.*`)."""

    def __init__(self, config):
        super().__init__(config)
        self.decoder = WhisperDecoder(config)

    def forward(self, *args, **kwargs):
        return self.decoder(*args, **kwargs)


class WhisperForCausalLM(WhisperPreTrainedModel):
    """Whisper's decoder and head as a decoder-only model, as later releases of transformers define it (v4.31.0 has
    none) for distil-whisper's decoder-only assistants: it cross-attends to the encoder outputs it is offered, which
    assisted generation gives it from the model's `encoder_outputs`."""

    main_input_name = "input_ids"
    _tied_weights_keys = ["proj_out.weight"]

    def __init__(self, config):
        config = copy.deepcopy(config)
        config.is_encoder_decoder = False
        super().__init__(config)
        self.model = _WhisperDecoderOnly(config)
        self.proj_out = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.decoder.embed_tokens

    def set_input_embeddings(self, value):
        self.model.decoder.embed_tokens = value

    def get_output_embeddings(self):
        return self.proj_out

    def set_output_embeddings(self, new_embeddings):
        self.proj_out = new_embeddings

    def get_decoder(self):
        return self.model.decoder

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        encoder_outputs=None,
        past_key_values=None,
        use_cache=None,
        return_dict=True,
        **kwargs,
    ):
        outputs = self.model.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            encoder_hidden_states=None if encoder_outputs is None else encoder_outputs[0],
            past_key_values=past_key_values,
            use_cache=use_cache,
            return_dict=True,
        )
        return CausalLMOutputWithCrossAttentions(
            logits=self.proj_out(outputs.last_hidden_state), past_key_values=outputs.past_key_values
        )

    def prepare_inputs_for_generation(
        self, input_ids, past_key_values=None, use_cache=None, encoder_outputs=None, attention_mask=None, **kwargs
    ):
        if past_key_values is not None:
            # keeps the tokens the cache has not seen (assisted generation feeds several)
            past_length = past_key_values[0][0].shape[2]
            input_ids = input_ids[:, past_length:] if input_ids.shape[1] > past_length else input_ids[:, -1:]
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "encoder_outputs": encoder_outputs,
            "past_key_values": past_key_values,
            "use_cache": use_cache,
        }


def _decoder_weights(target, assistant) -> dict[str, torch.Tensor]:
    """The target's weights of every name of the assistant's decoder and head: the embeddings, the positions, the first
    decoder layers and the final layer norm (the head is tied to the embeddings)."""
    weights = target.state_dict()
    names = [name for name in assistant.state_dict() if not name.startswith("model.encoder.")]
    assert all(name in weights for name in names), sorted(set(names) - set(weights))
    return {name: weights[name] for name in names}


@pytest.fixture(scope="module")
def whisper_base(real):
    """(processor, model, {"shared-encoder": ..., "decoder-only": ...}): drafts of the model's first
    `WHISPER_DRAFT_LAYERS` decoder layers."""
    processor = WhisperProcessor.from_pretrained(real.whisper_base)
    target = WhisperForConditionalGeneration.from_pretrained(real.whisper_base).to(DEVICE).eval()
    config = copy.deepcopy(target.config)
    config.decoder_layers = WHISPER_DRAFT_LAYERS

    shared = WhisperForConditionalGeneration(config).eval()
    missing, unexpected = shared.load_state_dict(_decoder_weights(target, shared), strict=False)
    assert not unexpected and all(name.startswith("model.encoder.") for name in missing), (missing, unexpected)
    shared.model.encoder = target.model.encoder  # distil-whisper's shape: the model's encoder, one module
    shared.generation_config = copy.deepcopy(target.generation_config)

    decoder_only = WhisperForCausalLM(config).eval()
    decoder_only.load_state_dict(_decoder_weights(target, decoder_only), strict=True)
    decoder_only.generation_config = copy.deepcopy(target.generation_config)

    assistants = {"shared-encoder": shared.to(DEVICE), "decoder-only": decoder_only.to(DEVICE)}
    assert shared.get_encoder() is target.get_encoder()
    for assistant in assistants.values():
        assert (
            assistant.get_output_embeddings().weight.data_ptr() == assistant.get_input_embeddings().weight.data_ptr()
        )
        assert torch.equal(assistant.get_decoder().layers[1].fc2.weight, target.model.decoder.layers[1].fc2.weight)
    return processor, target, assistants


def _transcribe(whisper_base, audio, batch_size, assistant=None):
    """(texts, the tokens `generate` returned for each clip) of the pipeline over the clips' `audio`."""
    processor, target, _ = whisper_base
    generate_kwargs = {"max_new_tokens": WHISPER_NEW_TOKENS}
    if assistant is not None:
        generate_kwargs.update(assistant_model=assistant, **FOUR_CANDIDATES)
    recognizer = pipeline(
        "automatic-speech-recognition",
        model=target,
        tokenizer=processor.tokenizer,
        feature_extractor=processor.feature_extractor,
        generate_kwargs=generate_kwargs,
        batch_size=batch_size,
        device=DEVICE,
    )
    generated = []
    generate = target.generate

    def recording_generate(*args, **kwargs):
        tokens = generate(*args, **kwargs)
        generated.extend(tokens)
        return tokens

    target.generate = recording_generate
    try:
        with torch.no_grad():
            outputs = recognizer([{"raw": samples, "sampling_rate": 16000} for samples in audio])
    finally:
        del target.generate
    assert len(outputs) == len(generated) == len(audio)
    return [output["text"] for output in outputs], generated


@pytest.fixture(scope="module")
def audio(real):
    """The samples of `CLIPS`."""
    return [real.audio(clip) for clip in CLIPS]


@real_models
@pytest.mark.parametrize("batch_size", [1, 2])
def test_whisper_pipeline_with_an_assistant(whisper_base, audio, batch_size):
    """The pipeline's transcripts (and tokens) with either draft as its assistant are its own without one."""
    texts, greedy = _transcribe(whisper_base, audio, batch_size)
    assert texts == [PIPELINE_TRANSCRIPTS[clip] for clip in CLIPS]
    for name, assistant in whisper_base[2].items():
        assisted_texts, assisted = _transcribe(whisper_base, audio, batch_size, assistant)
        for clip, greedy_tokens, assisted_tokens in zip(CLIPS, greedy, assisted, strict=True):
            assert_same_tokens(greedy_tokens, assisted_tokens, f"(pipeline, {name} assistant, {clip}, {batch_size=})")
        assert assisted_texts == texts, name


@real_models
def test_whisper_generate_with_an_assistant(real, whisper_base):
    """`generate` on the input features of a clip, four candidates a round: greedy's tokens with either draft, and
    the same rounds, as both drafts compute the same candidates (the decoder-only one from the model's encoder
    outputs)."""
    processor, target, assistants = whisper_base
    features = processor(real.audio(AMIABLE), sampling_rate=16000, return_tensors="pt").input_features.to(DEVICE)
    with torch.no_grad():
        greedy = target.generate(features, max_new_tokens=WHISPER_NEW_TOKENS)
    assert processor.batch_decode(greedy, skip_special_tokens=True) == [PIPELINE_TRANSCRIPTS[AMIABLE]]
    counts = {}
    for name, assistant in assistants.items():
        with torch.no_grad():
            output = target.generate(
                features,
                max_new_tokens=WHISPER_NEW_TOKENS,
                assistant_model=assistant,
                return_dict_in_generate=True,
                **FOUR_CANDIDATES,
            )
        assisted, stats = output.sequences, output.assisted_decoding_stats
        what = f"(Whisper base, {name} assistant, {AMIABLE})"
        assert_same_tokens(greedy, assisted, what)
        assert_counts_rounds(stats, greedy.shape[1] - 1, what)  # after the decoder start token
        assert stats.num_drafted > 0, stats
        counts[name] = (stats.num_rounds, stats.num_drafted, stats.num_accepted)
    assert (
        counts["decoder-only"] == counts["shared-encoder"]
    ), f"the decoder-only draft did not draft what the same decoder with the shared encoder drafts: {counts}"
