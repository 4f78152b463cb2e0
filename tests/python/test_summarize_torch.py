"""summarize() of torch tensors: shape, dtype, device, bytes, and nothing that
reads values or syncs a device.

Runs where torch is importable (Debian's python3-torch under /usr/bin/python3
here). With MLPROF_REQUIRE_TORCH=1 (CI) a missing torch fails instead of
skipping.
"""

from __future__ import annotations

import gc
import os
import sys
import weakref

import pytest

if os.environ.get("MLPROF_REQUIRE_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")

from mlflow_profiler import _core
from mlflow_profiler._summaries import IOSummary, summarize

# Debian's torch is built against Debian's numpy 1.x; where the test extras
# bring numpy 2, its first tensor warns that numpy interop is off. Nothing
# here converts to or from numpy.
pytestmark = pytest.mark.filterwarnings("ignore:Failed to initialize NumPy:UserWarning")


def expected(t) -> IOSummary:
    return IOSummary(
        type_name=f"{type(t).__module__}.{type(t).__qualname__}",
        shape=tuple(t.shape),
        dtype=str(t.dtype).replace("torch.", ""),
        length=t.shape[0] if t.dim() else None,
        size_bytes=t.element_size() * t.numel(),
        device=str(t.device),
    )


def test_tensor_exact_summary():
    t = torch.zeros(8, 128)
    assert summarize(t) == IOSummary(
        type_name="torch.Tensor",
        shape=(8, 128),
        dtype="float32",
        length=8,
        size_bytes=4096,
        device="cpu",
    )


@pytest.mark.parametrize(
    "dtype",
    ["float32", "float64", "float16", "bfloat16", "int64", "int8", "uint8", "bool", "complex64"],
)
def test_tensor_dtypes(dtype):
    t = torch.ones(3, 5, dtype=getattr(torch, dtype))
    assert summarize(t) == expected(t)
    assert summarize(t).dtype == dtype


def test_zero_d_views_and_parameters():
    scalar = torch.tensor(3.5)
    assert summarize(scalar) == IOSummary("torch.Tensor", (), "float32", None, 4, "cpu")
    base = torch.arange(100.0).reshape(10, 10)
    view = base[::2, 3:]  # bytes of the view's elements, not of its storage
    assert summarize(view) == IOSummary("torch.Tensor", (5, 7), "float32", 5, 140, "cpu")
    param = torch.nn.Parameter(torch.zeros(4, 2))
    assert summarize(param) == expected(param)
    assert summarize(param).type_name == "torch.nn.parameter.Parameter"
    grad = torch.ones(3, requires_grad=True) * 2
    assert summarize(grad) == expected(grad)


def test_meta_device_tensor():
    t = torch.empty(1000, 1000, device="meta")  # no storage at all
    assert summarize(t) == IOSummary(
        "torch.Tensor", (1000, 1000), "float32", 1000, 4_000_000, "meta"
    )


def test_sparse_tensor_never_raises():
    t = torch.eye(4).to_sparse()
    s = summarize(t)
    assert (
        s.type_name == "torch.Tensor"
        and s.shape == (4, 4)
        and s.dtype == "float32"
        and s.device == "cpu"
    )


class Spy(torch.Tensor):
    """Records every torch function that runs on it: attribute reads included."""

    seen: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        Spy.seen.append(getattr(func, "__name__", repr(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_no_value_is_read():
    t = torch.randn(16, 4).as_subclass(Spy)
    Spy.seen.clear()
    s = summarize(t)
    assert s.shape == (16, 4) and s.dtype == "float32" and s.device == "cpu" and s.size_bytes == 256
    assert s.repr_short is None
    reads_values = {
        "item",
        "tolist",
        "numpy",
        "__repr__",
        "__format__",
        "__str__",
        "__bool__",
        "__float__",
        "cpu",
        "to",
        "__array__",
        "__len__",
    }
    assert Spy.seen and not reads_values & set(Spy.seen), Spy.seen


def test_tensor_is_freed_after_summarize():
    t = torch.ones(1000, 1000)
    ref = weakref.ref(t)
    before = sys.getrefcount(t)
    summarize(t)
    _core._summarize_loop(t, 10)
    assert sys.getrefcount(t) == before
    del t
    gc.collect()
    assert ref() is None
