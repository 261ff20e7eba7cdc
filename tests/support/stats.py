"""The statistics of assisted calls made by code that does not ask for them (pipelines, helpers returning tokens)."""

import contextlib
from unittest import mock

from transformers.generation.utils import GenerationMixin


@contextlib.contextmanager
def recorded_stats():
    """Records the `assisted_decoding_stats` of every assisted decoding call made in the block, newest last; each call
    returns what it would have returned."""
    calls = []
    assisted_decoding = GenerationMixin.assisted_decoding

    def recording(self, *args, return_dict_in_generate=None, **kwargs):
        output = assisted_decoding(self, *args, return_dict_in_generate=True, **kwargs)
        calls.append(output.assisted_decoding_stats)
        if return_dict_in_generate is None:
            return_dict_in_generate = self.generation_config.return_dict_in_generate
        return output if return_dict_in_generate else output.sequences

    with mock.patch.object(GenerationMixin, "assisted_decoding", recording):
        yield calls
