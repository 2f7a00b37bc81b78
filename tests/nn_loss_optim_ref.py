# nn_loss_optim_ref.py - PyTorch's answers for tests/test_nn_loss_optim.c: reads the
# cases the test wrote (text, one token stream), runs torch's own losses, optimizers,
# clipping and schedulers on them, and writes one line of results per case. The
# optimizer, clipping and schedule cases come from stoke_model_step and stoke_lr_at,
# the code `stoke train` runs.
import sys
import warnings

import torch

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
tok = open(sys.argv[1]).read().split()
pos = 0


def take(n=None, conv=float):
    global pos
    if n is None:
        pos += 1
        return conv(tok[pos - 1])
    pos += n
    return [conv(t) for t in tok[pos - n:pos]]


def f32(vals):
    return torch.tensor(vals, dtype=torch.float32)


out = []
while pos < len(tok):
    kind = take(conv=str)
    if kind == "ce":
        B, K = take(conv=int), take(conv=int)
        eps = take()
        logits = f32(take(B * K)).reshape(B, K).requires_grad_()
        target = torch.tensor(take(B, int), dtype=torch.long)
        loss = torch.nn.CrossEntropyLoss(label_smoothing=eps)(logits, target)
        loss.backward()
        out.append([loss.item()] + logits.grad.flatten().tolist())
    elif kind == "pg":
        # the policy-gradient loss as a PPO implementation writes it (CleanRL style)
        B, K, cols = take(conv=int), take(conv=int), take(conv=int)
        clip, beta = take(), take()
        logits = f32(take(B * K)).reshape(B, K).requires_grad_()
        t = f32(take(B * cols)).reshape(B, cols)
        logp = torch.log_softmax(logits, dim=-1)
        lpa = logp.gather(1, t[:, 0].long()[:, None]).squeeze(1)
        adv = t[:, 1]
        if cols == 2:
            obj = adv * lpa
        else:
            ratio = torch.exp(lpa - t[:, 2])
            obj = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
        entropy = -(logp.exp() * logp).sum(-1)
        loss = (-obj - beta * entropy).mean()
        loss.backward()
        out.append([loss.item()] + logits.grad.flatten().tolist())
    elif kind in ("sgd", "adamw"):
        hp = take(5)
        n, steps = take(conv=int), take(conv=int)
        p = torch.nn.Parameter(f32(take(n)))
        if kind == "sgd":
            lr, mom, damp, wd, nest = hp
            opt = torch.optim.SGD([p], lr=lr, momentum=mom, dampening=damp,
                                  weight_decay=wd, nesterov=bool(nest))
        else:
            lr, b1, b2, eps, wd = hp
            opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
        for _ in range(steps):
            p.grad = f32(take(n))
            opt.step()
        out.append(p.detach().tolist())
    elif kind == "clip":
        max_norm = take()
        count = take(conv=int)
        sizes = take(count, int)
        ps = []
        for s in sizes:
            q = torch.nn.Parameter(torch.zeros(s))
            q.grad = f32(take(s))
            ps.append(q)
        norm = torch.nn.utils.clip_grad_norm_(ps, max_norm)
        out.append([norm.item()] + [v for q in ps for v in q.grad.tolist()])
    elif kind == "sched":
        k = take(conv=int)
        base, step_size, gamma, total, min_lr, warm, nsteps = take(7)
        step_size, total, warm, nsteps = int(step_size), int(total), int(warm), int(nsteps)
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
        S = torch.optim.lr_scheduler

        def main():
            if k == 1:
                return S.StepLR(opt, step_size=step_size, gamma=gamma)
            if k == 2:
                return S.CosineAnnealingLR(opt, T_max=total - warm, eta_min=min_lr)
            return S.LambdaLR(opt, lambda e: 1.0)

        # stoke's warm-up, lr (step + 1) / W for step < W, is LinearLR from 1/W to 1
        # over W - 1 steps (W = 1: the full lr at once), then the main schedule from
        # its start at step W
        if warm > 1:
            first = S.LinearLR(opt, start_factor=1.0 / warm, end_factor=1.0,
                               total_iters=warm - 1)
            sched = S.SequentialLR(opt, [first, main()], milestones=[warm])
        elif warm == 1:
            first = S.LambdaLR(opt, lambda e: 1.0)
            sched = S.SequentialLR(opt, [first, main()], milestones=[warm])
        else:
            sched = main()
        lrs = []
        for _ in range(nsteps):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        out.append(lrs)
    else:
        sys.exit("nn_loss_optim_ref.py: unknown case " + kind)

with open(sys.argv[2], "w") as fh:
    for row in out:
        fh.write(" ".join(repr(float(v)) for v in row) + "\n")
