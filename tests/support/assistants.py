"""The state an assistant starts every assisted run of the suite from (kept out of tiny_models.py, whose code
fingerprints the recorded stock outputs)."""


def reset_assistant(model):
    """Starts `model`, as an assistant, from v4.31.0's draft-length rule: 5 candidates, +2 after a round whose
    candidates were all accepted, -1 otherwise. The suite checks the tokens of rounds that verify candidates: the
    default schedule of the series ("adaptive") drafts none where they do not pay, which a test model's assistant
    (often the model itself) rarely does. `tests/integration/test_draft_length.py` tests the schedules themselves.
    On stock 4.31.0 (which keeps the draft length on the assistant, as `max_assistant_tokens`) the generation config's
    attributes are plain ones that nothing reads."""
    if hasattr(model, "max_assistant_tokens"):
        del model.max_assistant_tokens
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None:
        generation_config.num_assistant_tokens = 5
        generation_config.num_assistant_tokens_schedule = "heuristic"
