"""The PyTorch half of the round trip (test/checkpoint/torch_main.cpp is the other): a GPT written
here in PyTorch, independently of epl, with the architecture of examples/gpt and its attribute
names as the user's C++ structs spell them (gpt.hpp: Gpt{embed, body, head}, Block{attn, mlp}, ...).

1. Loads the weights epl exported (model.safetensors, from a model trained split 2 ways) by name,
   with load_state_dict(strict=True), and reproduces epl's evaluate loss on the same batch within
   1e-5 relative.
2. Writes weights of its own (torch.safetensors, PyTorch's initialisation) and their loss
   (torch_loss.txt), which epl then loads by name and reproduces.

    torch_round_trip.py DIR
"""
import math
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from safetensors.torch import load_file, save_file
except ImportError as e:
    sys.exit(f"this test needs PyTorch and Python's safetensors ({e}); tools/quickstart.sh test installs them (Debian's "
             f"python3-torch, PyPI's safetensors into build/pyenv)")

root = sys.argv[1]
V, T, L, H, C = 32, 8, 2, 2, 16  # torch_main.cpp's kShape


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in self.qkv(x).split(C, dim=2))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = (q @ k.transpose(-1, -2) / math.sqrt(C // H)).masked_fill(mask, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, C))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Residual(nn.Sequential):  # x + the layers in order; they are named 0, 1, ... as epl's nn::Residual names them
    def forward(self, x):
        return x + super().forward(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Residual(nn.LayerNorm(C), CausalSelfAttention())
        self.mlp = Residual(nn.LayerNorm(C), Mlp())

    def forward(self, x):
        return self.mlp(self.attn(x))


class PositionEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(T, C) * 0.02)

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, C), PositionEmbedding()

    def forward(self, idx):
        return self.pos(self.tok(idx))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.lm = nn.LayerNorm(C), nn.Linear(C, V)

    def forward(self, x):
        return self.lm(self.ln(x))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.body, self.head = Embed(), nn.ModuleList(Block() for _ in range(L)), Head()

    def forward(self, idx):
        x = self.embed(idx)
        for b in self.body:
            x = b(x)
        return self.head(x)


def loss_of(model, inputs, targets):
    with torch.no_grad():
        m = Gpt().double()
        m.load_state_dict({k: v.double() for k, v in model.state_dict().items()}, strict=True)
        return F.cross_entropy(m(inputs).reshape(-1, V), targets.reshape(-1)).item()


with open(f"{root}/batch.txt") as f:
    rows, cols = map(int, f.readline().split())
    inputs = torch.tensor([int(v) for v in f.readline().split()]).reshape(rows, cols)
    targets = torch.tensor([int(v) for v in f.readline().split()]).reshape(rows, cols)

# 1. epl's trained weights, by name, strictly
model = Gpt()
weights = load_file(f"{root}/model.safetensors")
model.load_state_dict(weights, strict=True)
ours = loss_of(model, inputs, targets)
theirs = float(open(f"{root}/epl_loss.txt").read())
rel = abs(ours - theirs) / abs(theirs)
print(f"PyTorch {torch.__version__} loaded {len(weights)} tensors strictly: loss {ours:.9g}, epl's {theirs:.9g} "
      f"(relative difference {rel:.2e})")
assert rel < 1e-5, f"PyTorch's loss {ours} on epl's weights differs from epl's {theirs} by {rel:.2e} relative"

# 2. PyTorch's own weights, for epl to load
torch.manual_seed(7)
fresh = Gpt()
save_file({k: v.contiguous() for k, v in fresh.state_dict().items()}, f"{root}/torch.safetensors", metadata={"format": "pt"})
with open(f"{root}/torch_loss.txt", "w") as f:
    f.write(f"{loss_of(fresh, inputs, targets):.12g}\n")
print("epl's weights load into PyTorch by name and give epl's loss")
