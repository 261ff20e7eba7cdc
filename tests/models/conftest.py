"""Settings for the per-model tests: one torch thread per process (the tiny models gain nothing from more, and
pytest-xdist already runs one process per core) and quiet transformers logging."""

import torch
import transformers

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
