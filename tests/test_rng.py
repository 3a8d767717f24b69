"""builder.pipeline.rng against torch.randn, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from builder.errors import InputError
from builder.pipeline import rng

SHAPES = [(1,), (5,), (15,), (16,), (20,), (33,), (1, 128, 4, 4), (1, 128, 4, 6), (1, 128, 32, 32), (2, 7, 9)]


@pytest.mark.parametrize("seed", [0, 42, 123456789, 2**32 + 42])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_torch_randn_is_bit_exact(shape: tuple[int, ...], seed: int) -> None:
    expected = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed)).numpy()
    actual = rng.torch_randn(shape, seed)
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    differing = int((actual.view(np.uint32) != expected.view(np.uint32)).sum())
    assert differing == 0, f"{differing} of {actual.size} values differ from torch.randn"


def test_torch_randn_large_is_fast_and_exact() -> None:
    import time

    shape = (1, 128, 64, 64)  # 1024x1024 px
    start = time.perf_counter()
    actual = rng.torch_randn(shape, 7)
    seconds = time.perf_counter() - start
    expected = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(7)).numpy()
    assert np.array_equal(actual.view(np.uint32), expected.view(np.uint32))
    assert seconds < 2.0, f"torch_randn took {seconds:.2f} s for 524288 values"


def test_torch_randn_rejects_bad_seed() -> None:
    with pytest.raises(InputError, match="seed"):
        rng.torch_randn((16,), -1)
