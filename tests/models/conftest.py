"""Settings and fixtures of the per-model tests: quiet transformers logging, the recorded stock outputs."""

import pytest
import transformers

from models import harness
from support.expectations import EXPECTATIONS

transformers.logging.set_verbosity_error()


@pytest.fixture(scope="module")
def recorded(request):
    """The stock 4.31.0 outputs recorded for this device by `make record-plain`, checked to come from the current
    tiny models and inputs. A module that sets `RECORDING_FALLS_BACK_TO_CPU = True` gets the CPU recording where this
    device has none."""
    data = harness.load_recorded()
    if data is None and getattr(request.module, "RECORDING_FALLS_BACK_TO_CPU", False):
        data = harness.load_recorded("cpu")
    if data is None:
        pytest.skip(f"no stock data for this device: run `make record-plain` ({harness.data_file().name})")
    if data["meta"]["fingerprint"] != harness.factory_fingerprint():
        pytest.fail(
            "the stock data was recorded with other tiny models or inputs (fingerprint mismatch): "
            "run `make record-plain` and commit tests/models/data/"
        )
    return data


@pytest.fixture
def entry(request):
    """The expectation-table entry of the test's `name` parameter; the test is skipped when the class needs an
    optional module that is not installed."""
    name = request.node.callspec.params["name"]
    entry = EXPECTATIONS.get(name)
    assert entry is not None, f"{name} has no entry in tests/support/expectations.py"
    missing = harness.missing_requirement(name)
    if missing:
        pytest.skip(f"requires {missing}, which is not installed")
    return entry
