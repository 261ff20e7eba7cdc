"""Plain generation must not change: greedy, beam and contrastive search of every class return exactly what stock
transformers 4.31.0 returned (recorded in `data/stock-<device>.json` by `make record-plain`), including failing the
same way where stock fails (e.g. contrastive search of models without a cache).

Test ids: `test_plain_unchanged[ClassName-inputs-mode]`, with inputs `plain` and the class's extra-input scenario
(`token_type_ids`, `left_pad` or `enc_mask`).
"""

import pytest

from models import harness

CASES = [
    (name, inputs, mode)
    for name in sorted(harness.classes())
    for inputs in harness.plain_input_sets(name)
    for mode in harness.PLAIN_MODES
]

FLOAT_ATOL = 1e-5  # audio decoded from the generated codes (Musicgen), not the codes themselves


@pytest.mark.parametrize("name, inputs, mode", CASES, ids=[f"{n}-{i}-{m}" for n, i, m in CASES])
def test_plain_unchanged(name, inputs, mode, entry, recorded):
    assert name in recorded["plain"], f"no stock output recorded for {name}: run `make record-plain`"
    stock = recorded["plain"][name][f"{inputs}/{mode}"]
    result = harness.run_plain(name, inputs, mode)
    if "error" in stock or "error" in result:
        assert result == stock, f"stock: {stock}, now: {result}"
    elif "float" in stock:
        import torch

        assert "float" in result
        assert torch.allclose(torch.tensor(result["float"]), torch.tensor(stock["float"]), atol=FLOAT_ATOL)
    else:
        assert result == stock, f"{mode} output changed:\n  stock: {stock['int']}\n  now:   {result.get('int')}"
