"""Settings for the per-model tests: quiet transformers logging."""

import transformers

transformers.logging.set_verbosity_error()
