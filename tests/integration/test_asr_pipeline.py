"""The automatic-speech-recognition pipeline with an assistant (the way distil-whisper is used).

`pipeline("automatic-speech-recognition", ..., generate_kwargs={"assistant_model": assistant})` with a tiny random
Whisper, a tokenizer and a feature extractor built here (a byte-level vocabulary with Whisper's special tokens; the
default `WhisperFeatureExtractor`), two clips of audio, batch size 1 and 2. Assistants: a smaller Whisper (a draft
sharing the model's weights), the model itself, and a decoder-only GPT-2 over the same vocabulary.

Contract: the tokens of every transcription equal those of the pipeline without an assistant. The pipeline runs the
model's encoder itself and gave `generate` the encoder outputs alone: an encoder-decoder assistant's encoder then ran
on placeholder ids, in every release (stock 4.31.0 also refuses batches). `generate` given the encoder outputs alone
reuses them for an assistant that shares the model's encoder, and refuses any other encoder-decoder assistant with
the reason.
"""

import json
from unittest import mock

import numpy as np
import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperTokenizer,
    pipeline,
)
from transformers.generation.candidates import BatchRows
from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

from integration._common import assert_same_tokens, run
from support.assistants import reset_assistant
from support.tiny_models import _sensitive_init

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|en|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nocaptions|>",
    "<|notimestamps|>",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A byte-level vocabulary without merges, and Whisper's special tokens."""
    directory = tmp_path_factory.mktemp("whisper-tokenizer")
    vocab = {symbol: index for index, symbol in enumerate(bytes_to_unicode().values())}
    for token in SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab))
    (directory / "merges.txt").write_text("#version: 0.2\n")
    end = SPECIAL_TOKENS[0]
    tokenizer = WhisperTokenizer(
        str(directory / "vocab.json"),
        str(directory / "merges.txt"),
        unk_token=end,
        bos_token=end,
        eos_token=end,
        pad_token=end,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    return tokenizer


def _initialise(model, seed):
    _sensitive_init(model, seed)
    return model


def _whisper(tokenizer, seed, layers):
    start = tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        d_model=32,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=37,
        decoder_ffn_dim=37,
        max_source_positions=1500,
        max_target_positions=64,
        decoder_start_token_id=start,
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        suppress_tokens=None,
        begin_suppress_tokens=None,
    )
    torch.manual_seed(seed)
    model = _initialise(WhisperForConditionalGeneration(config), seed).eval()
    with torch.no_grad():  # let the decoder hear the audio: small encoder positions, strong cross-attention values
        model.model.encoder.embed_positions.weight.mul_(0.05)
        for layer in model.model.decoder.layers:
            layer.encoder_attn.v_proj.weight.mul_(4.0)
    model.generation_config.eos_token_id = None  # no EOS stopping: every transcription has its full length
    return model


@pytest.fixture(scope="module")
def models(tokenizer):
    model = _whisper(tokenizer, seed=0, layers=2)
    draft = _whisper(tokenizer, seed=1, layers=1)
    shared = {name: tensor for name, tensor in model.state_dict().items() if name in draft.state_dict()}
    draft.load_state_dict(
        {**draft.state_dict(), **{k: v for k, v in shared.items() if v.shape == draft.state_dict()[k].shape}}
    )
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=4, n_positions=64, bos_token_id=end)
    torch.manual_seed(2)
    decoder_only = _initialise(GPT2LMHeadModel(config), seed=2).eval()
    decoder_only.generation_config.eos_token_id = None
    with torch.no_grad():  # the model's output projection: it agrees with the model part of the time
        decoder_only.lm_head.weight.copy_(model.proj_out.weight)
    return {"model": model, "whisper-draft": draft, "model-itself": model, "gpt2": decoder_only}


AUDIO_SECONDS = (2, 3)


def _audio():
    rng = np.random.default_rng(0)
    time = np.arange(16000 * AUDIO_SECONDS[0]) / 16000
    return [
        (0.5 * np.sin(2 * np.pi * 440 * time)).astype(np.float32),
        rng.standard_normal(16000 * AUDIO_SECONDS[1]).astype(np.float32),
    ]


def _transcribe(model, tokenizer, batch_size, assistant=None):
    """The tokens `generate` returned for each clip, through the pipeline."""
    generated = []
    generate = model.generate

    def recording_generate(*args, **kwargs):
        tokens = generate(*args, **kwargs)
        generated.extend(tokens.tolist())
        return tokens

    generate_kwargs = {"max_new_tokens": 10}
    if assistant is not None:
        reset_assistant(assistant)
        generate_kwargs["assistant_model"] = assistant
    recognizer = pipeline(
        "automatic-speech-recognition",
        model=model,
        tokenizer=tokenizer,
        feature_extractor=WhisperFeatureExtractor(),
        generate_kwargs=generate_kwargs,
        batch_size=batch_size,
        device="cpu",
    )
    model.generate = recording_generate
    try:
        texts = [output["text"] for output in recognizer(_audio())]
    finally:
        del model.generate
    assert len(texts) == len(AUDIO_SECONDS)
    return torch.tensor(generated)


@pytest.mark.parametrize("batch_size", [1, 2])
@pytest.mark.parametrize("assistant", ["whisper-draft", "model-itself", "gpt2"])
def test_pipeline_with_an_assistant(models, tokenizer, assistant, batch_size):
    model = models["model"]
    greedy = _transcribe(model, tokenizer, batch_size)
    assert not torch.equal(greedy[0], greedy[1]), "both clips give the same tokens: the test proves nothing"
    assisted = _transcribe(model, tokenizer, batch_size, assistant=models[assistant])
    assert_same_tokens(greedy, assisted, f"(pipeline, {assistant}, batch size {batch_size})")


def test_encoder_outputs_alone(models):
    """`generate` given the encoder outputs alone: the model itself reuses them, another Whisper is refused."""
    model = models["model"]
    features = WhisperFeatureExtractor()(_audio(), sampling_rate=16000, return_tensors="pt").input_features
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(features)
    inputs = {"encoder_outputs": encoder_outputs, "max_new_tokens": 10, "do_sample": False}
    greedy = run(model, **inputs)
    assert_same_tokens(greedy, run(model, models["model-itself"], **inputs), "(the model as its own assistant)")
    assert_same_tokens(greedy, run(model, models["gpt2"], **inputs), "(a decoder-only assistant)")
    with pytest.raises(ValueError, match="needs the encoder input"):
        run(model, models["whisper-draft"], **inputs)


def test_batched_rows_keep_their_own(models, tokenizer):
    """With the Whisper draft and two clips a batch, the rows keep their own candidates once the forced tokens are
    behind them (Whisper declares `_supports_rows_with_holes`), and still transcribe as the pipeline does alone."""
    model = models["model"]
    greedy = _transcribe(model, tokenizer, 2)
    with mock.patch.object(BatchRows, "keep_own_from", autospec=True, side_effect=BatchRows.keep_own_from) as spy:
        assisted = _transcribe(model, tokenizer, 2, assistant=models["whisper-draft"])
    assert spy.call_args.args[1] is not None
    assert_same_tokens(greedy, assisted, "(pipeline, whisper-draft, batch size 2, rows of their own)")
