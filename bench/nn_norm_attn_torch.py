#!/usr/bin/python3
"""nn_norm_attn_torch.py [THREADS] - PyTorch's side of bench/nn_norm_attn_bench.c: the
same kernels on the same shapes, best-of-10 milliseconds per call."""
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads())
print("threads", torch.get_num_threads())


def best(fn, reps=10):
    fn()
    t = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t * 1e3


def line(name, ms):
    print(f"{name:34s} {ms:9.3f} ms")


def grad_of(fn, x, dy):
    x = x.detach().requires_grad_()
    y = fn(x)
    return lambda: torch.autograd.grad(y, x, dy, retain_graph=True)


with torch.no_grad():
    x = torch.rand(128, 32, 28, 28) * 2 - 1
dy = torch.rand_like(x)
line("relu fwd (128,32,28,28)", best(lambda: F.relu(x)))
line("relu bwd", best(grad_of(F.relu, x, dy)))
line("gelu fwd", best(lambda: F.gelu(x)))
line("gelu bwd", best(grad_of(F.gelu, x, dy)))
line("tanh fwd", best(lambda: torch.tanh(x)))
line("sigmoid fwd", best(lambda: torch.sigmoid(x)))
line("dropout fwd p=0.1", best(lambda: F.dropout(x, 0.1, True)))
bn = torch.nn.BatchNorm2d(32)
line("batchnorm train fwd", best(lambda: bn(x)))
xb = x.detach().requires_grad_()
yb = bn(xb)
line("batchnorm train bwd", best(lambda: torch.autograd.grad(yb, [xb, bn.weight, bn.bias], dy,
                                                             retain_graph=True)))

bn1 = torch.nn.BatchNorm1d(512)
x1 = torch.rand(256, 512) * 2 - 1
dy1 = torch.rand_like(x1)
line("batchnorm1d train fwd (256,512)", best(lambda: bn1(x1)))
x1g = x1.detach().requires_grad_()
y1 = bn1(x1g)
line("batchnorm1d train bwd", best(lambda: torch.autograd.grad(y1, [x1g, bn1.weight, bn1.bias],
                                                               dy1, retain_graph=True)))

B, T, C, H = 64, 65, 128, 4
xt = torch.rand(B, T, C) * 2 - 1
dyt = torch.rand_like(xt)
ln = torch.nn.LayerNorm(C)
line("layernorm fwd (4160,128)", best(lambda: ln(xt)))
xl = xt.detach().requires_grad_()
yl = ln(xl)
line("layernorm bwd", best(lambda: torch.autograd.grad(yl, [xl, ln.weight, ln.bias], dyt,
                                                       retain_graph=True)))
g = torch.rand(B * T, 4 * C) * 2 - 1
line("gelu fwd (4160,512)", best(lambda: F.gelu(g)))
line("softmax fwd (16640,128)", best(lambda: torch.softmax(g.view(-1, C), -1)))
mha = torch.nn.MultiheadAttention(C, H, batch_first=True)
with torch.no_grad():
    line("attention fwd B64 T65 C128 H4", best(lambda: mha(xt, xt, xt, need_weights=False)))
xa = xt.detach().requires_grad_()
ya, _ = mha(xa, xa, xa, need_weights=False)
line("attention bwd", best(lambda: torch.autograd.grad(ya, [xa] + list(mha.parameters()), dyt,
                                                       retain_graph=True)))
