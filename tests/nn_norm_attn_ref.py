#!/usr/bin/python3
"""nn_norm_attn_ref.py MODE IN OUT SIZES... - torch references for test_nn_norm_eltwise
and test_nn_attn: reads float32 arrays from IN in the order the C test wrote them,
writes torch's float32 results to OUT in the order the C test reads them.

  norm IN OUT n N C B BC H W   gelu (exact, tanh) of x (n); layer_norm of (N, C) with
                               weight, bias, dout; batch_norm (train, then eval with
                               the updated running statistics) of (B, BC, H, W)
  attn IN OUT B T C H          nn.MultiheadAttention(batch_first=True) forward and
                               backward with the given in/out projection parameters,
                               without and then with a causal mask
"""
import sys

import numpy as np
import torch

torch.set_num_threads(1)


class Reader:
    def __init__(self, path):
        self.data = np.fromfile(path, dtype=np.float32)
        self.pos = 0

    def take(self, *shape):
        n = int(np.prod(shape))
        a = self.data[self.pos:self.pos + n].reshape(shape)
        self.pos += n
        return torch.tensor(a, dtype=torch.float32)

    def done(self):
        assert self.pos == self.data.size, (self.pos, self.data.size)


def norm(r, out, n, N, C, B, BC, H, W):
    x = r.take(n)
    res = [torch.nn.functional.gelu(x), torch.nn.functional.gelu(x, approximate="tanh")]

    lx = r.take(N, C).requires_grad_()
    lw = r.take(C).requires_grad_()
    lb = r.take(C).requires_grad_()
    ldy = r.take(N, C)
    ly = torch.nn.functional.layer_norm(lx, (C,), lw, lb, eps=1e-5)
    ly.backward(ldy)
    res += [ly, lx.grad, lw.grad, lb.grad]

    bx = r.take(B, BC, H, W).requires_grad_()
    bw = r.take(BC)
    bb = r.take(BC)
    rm = r.take(BC)
    rv = r.take(BC)
    bdy = r.take(B, BC, H, W)
    r.done()
    bn = torch.nn.BatchNorm2d(BC, eps=1e-5, momentum=0.1)
    with torch.no_grad():
        bn.weight.copy_(bw)
        bn.bias.copy_(bb)
        bn.running_mean.copy_(rm)
        bn.running_var.copy_(rv)
    bn.train()
    by = bn(bx)
    by.backward(bdy)
    res += [by, bn.running_mean, bn.running_var, bx.grad, bn.weight.grad, bn.bias.grad]
    bn.eval()
    res += [bn(bx)]
    write(out, res)


def attn(r, out, B, T, C, H):
    x0 = r.take(B, T, C)
    w_qkv = r.take(3 * C, C)
    b_qkv = r.take(3 * C)
    w_out = r.take(C, C)
    b_out = r.take(C)
    dy = r.take(B, T, C)
    r.done()
    res = []
    for causal in (False, True):
        m = torch.nn.MultiheadAttention(C, H, batch_first=True)
        with torch.no_grad():
            m.in_proj_weight.copy_(w_qkv)
            m.in_proj_bias.copy_(b_qkv)
            m.out_proj.weight.copy_(w_out)
            m.out_proj.bias.copy_(b_out)
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1) if causal else None
        x = x0.clone().requires_grad_()
        y, _ = m(x, x, x, need_weights=False, attn_mask=mask)
        y.backward(dy)
        res += [y, x.grad, m.in_proj_weight.grad, m.in_proj_bias.grad,
                m.out_proj.weight.grad, m.out_proj.bias.grad]
    write(out, res)


def write(path, tensors):
    with open(path, "wb") as f:
        for t in tensors:
            f.write(t.detach().to(torch.float32).contiguous().numpy().tobytes())


def main():
    mode, inp, out = sys.argv[1:4]
    sizes = [int(a) for a in sys.argv[4:]]
    r = Reader(inp)
    {"norm": norm, "attn": attn}[mode](r, out, *sizes)


if __name__ == "__main__":
    main()
