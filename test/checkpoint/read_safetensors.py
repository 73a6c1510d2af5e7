"""The Python half of the safetensors test: PyTorch's safetensors package (from PyPI) reads the
file epl exported, and every tensor equals, bit for bit, what the trainer held (reference.txt,
written by export_main.cpp).

    read_safetensors.py DIR
"""
import sys

try:
    import numpy as np
    from safetensors.numpy import load_file
    from safetensors import safe_open
except ImportError as e:
    sys.exit(f"this test needs Python's safetensors and numpy ({e}); tools/quickstart.sh test installs them into "
             f"build/pyenv, or: pip install safetensors numpy")

root = sys.argv[1]
tensors = load_file(f"{root}/model.safetensors")
with safe_open(f"{root}/model.safetensors", framework="numpy") as f:
    metadata = f.metadata()
assert metadata.get("format") == "pt", metadata
assert metadata.get("epl.step") == "3", metadata

expected = {}
for line in open(f"{root}/reference.txt"):
    head, values = line.split(":")
    name, *dims = head.split()
    expected[name] = np.array([float(v) for v in values.split()], dtype=np.float32).reshape([int(d) for d in dims])

assert set(tensors) == set(expected), f"names differ: {sorted(set(tensors) ^ set(expected))}"
for name, want in expected.items():
    got = tensors[name]
    assert got.dtype == np.float32, f"{name}: dtype {got.dtype}"
    assert got.shape == want.shape, f"{name}: shape {got.shape}, the trainer's {want.shape}"
    assert np.array_equal(got, want), f"{name}: values differ by up to {np.max(np.abs(got - want))}"
print(f"safetensors: {len(tensors)} tensors, {sum(t.size for t in tensors.values())} values, equal to the trainer's")
