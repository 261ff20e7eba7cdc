"""The pieces of scripts/real_models.py: pinned packages, the CTranslate2 and GGUF conversions, the speech clips."""
