"""What assisted generation must do for every class that defines `prepare_inputs_for_generation`.

This table is the specification of the patch series. Every class the suite discovers (see
`support.tiny_models.discover_generation_classes`) must have an entry, and every entry must name a discovered class:

- `supported`: assisted generation returns exactly what greedy generation returns, in every scenario that applies
  to the class (`support.tiny_models.applicable_scenarios`), and the slicing of `prepare_inputs_for_generation`
  follows the cache length.
- `refused`: assisted generation raises a `ValueError` whose message contains
  "Assisted generation is not supported by {ClassName}: {reason}". `reason` is the text the series puts in the
  message; `why` explains it for the documentation. The class's `prepare_inputs_for_generation` keeps the stock
  one-token behaviour, unless the entry says `slices=True`: the class refuses for a reason other than its inputs or
  its cache (its own `generate`, its attention mask), and its method follows the slicing rule like every other.

`known_failures` lists scenarios where a supported class is known to differ, each with the reason: its test is a
strict xfail (it fails the suite once it passes, so that the entry is removed with the fix). Empty unless the project
decides to ship with a documented difference.

`requires` names an optional dependency without which the class cannot be built at all; its tests are skipped
(with that reason) where the dependency is missing, and run where it is installed.

`docs/model-status.md` renders this table next to the measured results (`make report`).
"""

from dataclasses import dataclass
from typing import Optional, Tuple

SUPPORTED = "supported"
REFUSED = "refused"

NO_CACHE = "it keeps no cache (`past_key_values`) that the candidate tokens could be verified on"
MEMORIES = "its cache of memories (`mems`) cannot be cropped back to the accepted candidate tokens"
ONE_TOKEN_DECODER = "its decoder only accepts one new token at a time with a cache"
CODEBOOKS = (
    "its generation interleaves the codebooks of each sample under a delay pattern, which the candidate tokens of an "
    "assistant model cannot follow"
)


@dataclass(frozen=True)
class Expectation:
    status: str
    reason: Optional[str] = None  # refused: the text the error message must contain
    why: Optional[str] = None  # what makes it so, for the documentation
    requires: Optional[str] = None  # importable module the class cannot be built without
    # (scenario, reason) pairs where assisted generation is known to differ: strict xfail, so a fix shows up
    known_failures: Tuple[Tuple[str, str], ...] = ()
    slices: bool = True  # whether `prepare_inputs_for_generation` keeps the tokens the cache has not seen

    @property
    def supported(self):
        return self.status == SUPPORTED


def supported(why=None, requires=None, known_failures=(), slices=True):
    return Expectation(SUPPORTED, why=why, requires=requires, known_failures=tuple(known_failures), slices=slices)


def refused(reason, why, slices=False):
    return Expectation(REFUSED, reason=reason, why=why, slices=slices)


_MASKED_LM = "a masked LM re-reads the whole sequence at every step (it appends a mask token); it has no cache"

EXPECTATIONS = {
    # ---- decoder-only ---------------------------------------------------------------------------------------------
    "BarkCausalModel": supported(),
    "BarkCoarseModel": supported(),
    "BarkSemanticModel": supported(
        why="prompted with `input_ids` through the generation mixin; its own `generate`, which prompts it with text "
        "embeddings merged with the history prompt (`input_embeds`), refuses an `assistant_model`"
    ),
    "BartForCausalLM": supported(),
    "BertGenerationDecoder": supported(
        why="with a cache its forward pass applies no attention mask to one new token, and a causal one to several"
    ),
    "BertLMHeadModel": supported(),
    "BigBirdForCausalLM": supported(),
    "BigBirdPegasusForCausalLM": supported(),
    "BioGptForCausalLM": supported(),
    "BlenderbotForCausalLM": supported(),
    "BlenderbotSmallForCausalLM": supported(),
    "BlipTextLMHeadModel": supported(why="tested with image embeddings as `encoder_hidden_states`"),
    "BloomForCausalLM": supported(why="fused (batch * heads) cache layout"),
    "CTRLLMHeadModel": supported(),
    "CamembertForCausalLM": supported(),
    "CodeGenForCausalLM": supported(),
    "CpmAntForCausalLM": supported(
        why="its forward pass takes the whole sequence and keeps the tokens the cache has not seen itself",
        slices=False,
    ),
    "Data2VecTextForCausalLM": supported(),
    "ElectraForCausalLM": supported(
        known_failures=[
            (
                "step_outputs",
                "greedy search runs Electra without a cache (its `prepare_inputs_for_generation` drops `use_cache`, "
                "which ElectraModel does not default from the config), so each of its steps holds every position; "
                "assisted generation verifies on top of a cache and returns one position per step, as for every "
                "other model",
            )
        ]
    ),
    "ErnieForCausalLM": supported(),
    "FalconForCausalLM": supported(),
    "GPT2DoubleHeadsModel": supported(),
    "GPT2LMHeadModel": supported(why="the issue's case (#25020): `token_type_ids`"),
    "GPTBigCodeForCausalLM": supported(why="multi-query single-tensor cache layout"),
    "GPTJForCausalLM": supported(),
    "GPTNeoForCausalLM": supported(),
    "GPTNeoXForCausalLM": supported(),
    "GPTNeoXJapaneseForCausalLM": supported(),
    "GPTSanJapaneseForConditionalGeneration": supported(why="prefix LM: `token_type_ids` mark the prefix"),
    "GitForCausalLM": supported(why="the cache also holds the image tokens before the text"),
    "ImageGPTForCausalImageModeling": supported(),
    "LlamaForCausalLM": supported(),
    "MBartForCausalLM": supported(),
    "MarianForCausalLM": supported(),
    "MegatronBertForCausalLM": supported(),
    "MvpForCausalLM": supported(),
    "OPTForCausalLM": supported(),
    "OpenLlamaForCausalLM": supported(),
    "PLBartForCausalLM": supported(),
    "PegasusForCausalLM": supported(),
    "QDQBertLMHeadModel": supported(requires="pytorch_quantization"),
    "RemBertForCausalLM": supported(),
    "RoCBertForCausalLM": supported(),
    "RoFormerForCausalLM": supported(),
    "RobertaForCausalLM": supported(),
    "RobertaPreLayerNormForCausalLM": supported(),
    "Speech2Text2ForCausalLM": supported(),
    "TrOCRForCausalLM": supported(),
    "XGLMForCausalLM": supported(),
    "XLMRobertaForCausalLM": supported(),
    "XLMRobertaXLForCausalLM": supported(),
    "XmodForCausalLM": supported(),
    # ---- encoder-decoder ------------------------------------------------------------------------------------------
    "BartForConditionalGeneration": supported(),
    "BigBirdPegasusForConditionalGeneration": supported(),
    "BlenderbotForConditionalGeneration": supported(),
    "BlenderbotSmallForConditionalGeneration": supported(),
    "EncoderDecoderModel": supported(why="tested with BERT encoder and decoder"),
    "FSMTForConditionalGeneration": supported(
        why="its decoder takes the whole `decoder_input_ids` and keeps the tokens the cache has not seen itself",
        slices=False,
    ),
    "LEDForConditionalGeneration": supported(),
    "LongT5ForConditionalGeneration": supported(),
    "M2M100ForConditionalGeneration": supported(),
    "MBartForConditionalGeneration": supported(),
    "MT5ForConditionalGeneration": supported(),
    "MarianMTModel": supported(),
    "MvpForConditionalGeneration": supported(),
    "NllbMoeForConditionalGeneration": supported(),
    "PLBartForConditionalGeneration": supported(),
    "PegasusForConditionalGeneration": supported(),
    "PegasusXForConditionalGeneration": supported(),
    "Pix2StructForConditionalGeneration": supported(
        why="tested with `flattened_patches`",
        known_failures=[
            (
                "step_outputs",
                "Pix2Struct's text decoder returns its self-attention weights as `cross_attentions` (and its position "
                "bias as `attentions`); assisted generation splits `cross_attentions` along the encoder's keys, so "
                "its per-step rows are wider than greedy's, with zeros past each token's own key",
            )
        ],
    ),
    "SpeechEncoderDecoderModel": supported(why="tested with a Wav2Vec2 encoder (`input_values`) and a BERT decoder"),
    "Speech2TextForConditionalGeneration": supported(why="tested with `input_features`"),
    "SpeechT5ForSpeechToText": supported(why="tested with `input_values`"),
    "SwitchTransformersForConditionalGeneration": supported(),
    "T5ForConditionalGeneration": supported(),
    "UMT5ForConditionalGeneration": supported(),
    "VisionEncoderDecoderModel": supported(why="tested with a ViT encoder (`pixel_values`) and a GPT-2 decoder"),
    "WhisperForConditionalGeneration": supported(why="tested with `input_features`"),
    # ---- refused: no cache ----------------------------------------------------------------------------------------
    "BertForMaskedLM": refused(NO_CACHE, _MASKED_LM),
    "BigBirdForMaskedLM": refused(NO_CACHE, _MASKED_LM),
    "ErnieForMaskedLM": refused(NO_CACHE, _MASKED_LM),
    "MegatronBertForMaskedLM": refused(NO_CACHE, _MASKED_LM),
    "NezhaForMaskedLM": refused(NO_CACHE, _MASKED_LM),
    "QDQBertForMaskedLM": Expectation(REFUSED, NO_CACHE, _MASKED_LM, requires="pytorch_quantization"),
    "RemBertForMaskedLM": refused(NO_CACHE, _MASKED_LM),
    "RoCBertForMaskedLM": refused(NO_CACHE, _MASKED_LM),
    "RoFormerForMaskedLM": refused(NO_CACHE, _MASKED_LM),
    "MarkupLMModel": refused(
        NO_CACHE,
        "a bare encoder without an LM head; its forward pass takes no cache (plain generation fails as well)",
    ),
    "OpenAIGPTLMHeadModel": refused(NO_CACHE, "GPT-1 was written without a key/value cache"),
    "FlaubertWithLMHeadModel": refused(NO_CACHE, "XLM-style models re-read the whole sequence at every step"),
    "XLMWithLMHeadModel": refused(NO_CACHE, "XLM-style models re-read the whole sequence at every step"),
    "ReformerModelWithLMHead": refused(
        "its cache (`past_buckets_states`) holds hashed buckets, which cannot be cropped back to the accepted "
        "candidate tokens",
        "Reformer's cache holds the LSH buckets of the tokens seen so far",
    ),
    "RwkvForCausalLM": refused(
        "its cache is a recurrent state that sums up every token seen so far, which cannot be rewound to the "
        "accepted candidate tokens",
        "RWKV keeps a recurrent state, which cannot be rewound to an earlier position",
    ),
    "TransfoXLLMHeadModel": refused(MEMORIES, "Transformer-XL keeps segment memories (`mems`), not a cropable cache"),
    "XLNetLMHeadModel": refused(MEMORIES, "XLNet keeps memories (`mems`) and predicts through a permutation mask"),
    # ---- refused: a cache that cannot take part, or a generate() of its own ------------------------------------
    "MegaForCausalLM": refused(
        "its cache holds an EMA state that cannot be cropped",
        "Mega's moving-average state summarises every token seen so far and cannot be rewound",
    ),
    "RagTokenForGeneration": supported(
        why="its own `generate` decodes the distribution marginalized over the retrieved documents and ignores an "
        "`assistant_model` with a warning, returning greedy search's tokens as v4.31.0 did; tested with given "
        "context documents and scores (no retriever)"
    ),
    "MusicgenForCausalLM": refused(CODEBOOKS, "its own `generate` decodes the codebooks with a delay pattern"),
    "MusicgenForConditionalGeneration": refused(
        CODEBOOKS, "its own `generate` decodes the codebooks with a delay pattern"
    ),
    "ProphetNetForCausalLM": refused(ONE_TOKEN_DECODER, "the n-gram predicting stream is built for one token"),
    "ProphetNetForConditionalGeneration": refused(
        ONE_TOKEN_DECODER, "the n-gram predicting stream is built for one token"
    ),
    "XLMProphetNetForCausalLM": refused(ONE_TOKEN_DECODER, "the n-gram predicting stream is built for one token"),
    "XLMProphetNetForConditionalGeneration": refused(
        ONE_TOKEN_DECODER, "the n-gram predicting stream is built for one token"
    ),
}


def expectation(class_name):
    """The table entry of `class_name`; raises KeyError (a test failure) where there is none."""
    return EXPECTATIONS[class_name]


def refusal_message(class_name):
    """The text the ValueError of a refused class must contain."""
    entry = EXPECTATIONS[class_name]
    return f"Assisted generation is not supported by {class_name}: {entry.reason}"
