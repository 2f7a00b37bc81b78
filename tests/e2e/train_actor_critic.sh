#!/bin/sh
# train_actor_critic.sh STOKE WORKDIR - `stoke train --model actor-critic` on rollouts
# written here by numpy: a contextual bandit whose best action depends on the
# observation (4 actions, 6 features), logged with a uniform behaviour policy, reward 1
# for the best action, advantage = reward - the mean reward. Trained on rows [action,
# advantage, return] (A2C), [action, advantage, old_log_prob, return] (PPO) and on the
# best action as a class (behaviour cloning), the policy's most likely action
# (`stoke predict`) on 500 fresh observations must be the best one far above chance
# (25%): a loss with the wrong sign drives it towards 0 (measured: 0.6%). Then eval,
# and the errors of bad rollouts. Each run takes well under a second.
set -u
stoke=$1
work=$2
py=/usr/bin/python3
if ! $py -c 'import numpy' 2>/dev/null; then
    echo "skip: /usr/bin/python3 with numpy is missing"
    exit 77
fi
. "$(dirname "$0")/lib.sh"

# gen DIR FORM N: DIR/rollouts_{x,y}.npy (N samples), DIR/val_{x,y}.npy (500),
# DIR/probe_x.npy and the best actions DIR/probe_best.npy (500); the same bandit
# (weights from seed 7) for every form.
gen() {
    mkdir -p "$1"
    $py - "$@" <<'EOF_PY'
import sys, numpy as np
out, form, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
K, D = 4, 6
W = np.random.default_rng(7).standard_normal((K, D))
rng = np.random.default_rng(11)
def rollouts(m, prefix):
    x = rng.standard_normal((m, D)).astype(np.float32)
    best = (x @ W.T).argmax(1)
    a = rng.integers(0, K, m)                  # the uniform behaviour policy
    r = (a == best).astype(np.float64)
    adv = r - r.mean()                         # a constant baseline
    if form == "a2c":
        y = np.stack([a, adv, r], 1).astype(np.float32)
    elif form == "ppo":
        y = np.stack([a, adv, np.full(m, np.log(1.0 / K)), r], 1).astype(np.float32)
    elif form == "bc":
        y = best.astype(np.int64)
    elif form == "wide":
        y = np.stack([a, adv, r, r, r], 1).astype(np.float32)
    elif form == "halfaction":
        y = np.stack([np.where(np.arange(m) == 7, 2.5, a), adv, r], 1).astype(np.float32)
    np.save(f"{out}/{prefix}_x.npy", x)
    np.save(f"{out}/{prefix}_y.npy", y)
rollouts(n, "rollouts")
rollouts(500, "val")
xp = rng.standard_normal((500, D)).astype(np.float32)
np.save(f"{out}/probe_x.npy", xp)
np.save(f"{out}/probe_best.npy", (xp @ W.T).argmax(1))
EOF_PY
}

# best_fraction DIR CKPT: prints the fraction of probe observations whose predicted
# action is the best one; checks every line has a value.
best_fraction() {
    "$stoke" predict "$2" "$1/probe_x.npy" >"$1/pred.txt" 2>"$1/pred.err" || { echo 0; return; }
    $py - "$1" <<'EOF_PY'
import sys, numpy as np
d = sys.argv[1]
lines = [l.split("\t") for l in open(f"{d}/pred.txt").read().splitlines()]
assert len(lines) == 500 and all(len(l) == 3 and l[2].startswith("value ") for l in lines), lines[:3]
pred = np.array([int(l[1]) for l in lines])
print(f"{(pred == np.load(f'{d}/probe_best.npy')).mean():.3f}")
EOF_PY
}

# above LIMIT VALUE: VALUE > LIMIT
above() { $py -c 'import sys; sys.exit(0 if float(sys.argv[2]) > float(sys.argv[1]) else 1)' "$1" "$2"; }

# train_form FORM MIN [MODEL]: trains on 3000 rollouts (--limit 2000), 5 epochs,
# validated on 500, and checks the best-action fraction exceeds MIN.
train_form() {
    form=$1 min=$2 model=${3:-actor-critic}
    d=$work/$form
    gen "$d" "$form" 3000
    "$stoke" train --model "$model" --dataset "$d/rollouts_x.npy" --val-dataset "$d/val_x.npy" \
        --limit 2000 --epochs 5 --batch-size 64 --checkpoint "$d/c.safetensors" --no-monitor \
        >"$out" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then fail "$form: train exit $rc"; sed 's/^/  | /' "$out"; return; fi
    metric="val mae"
    [ "$form" = bc ] && metric="val acc"
    if grep -q '^model: actor-critic on (6,)' "$out" && grep -q "^epoch 5/5 done .*$metric" "$out"; then
        ok "$form: trains (metric $metric)"
    else
        fail "$form: output"; sed 's/^/  | /' "$out"
    fi
    f=$(best_fraction "$d" "$d/c.safetensors")
    if above "$min" "$f"; then
        ok "$form: the policy picks the best action for $f of new observations (> $min; chance 0.25)"
    else
        fail "$form: best-action fraction $f, not above $min"; sed 's/^/  | /' "$d/pred.err"
    fi
}

train_form a2c 0.5
train_form ppo 0.5
train_form bc 0.8

# eval on the validation rollouts: the total loss and the value head's MAE
"$stoke" eval "$work/ppo/c.safetensors" --dataset "$work/ppo/val_x.npy" >"$out" 2>&1
if [ $? -eq 0 ] && grep -q '500 samples): loss -\{0,1\}[0-9.]*, MAE [0-9.]*' "$out"; then
    ok "eval"
else
    fail eval; sed 's/^/  | /' "$out"
fi

# A model file with PPO's options: clip and entropy bonus
printf 'model: actor-critic\nhidden: [32]\nclip: 0.1\nentropy: 0.01\n' >"$work/ppo.yaml"
train_form ppo 0.5 "$work/ppo.yaml"

# Bad rollouts and options: clear errors, exit 1.
expect() { # expect NAME PATTERN ARGS...
    name=$1 pattern=$2
    shift 2
    "$stoke" "$@" >"$out" 2>&1
    got=$?
    if [ $got -ne 1 ] || ! grep -q -- "$pattern" "$out"; then
        fail "$name: exit $got, pattern '$pattern'"; sed 's/^/  | /' "$out"
    else
        ok "$name"
    fi
}
gen "$work/wide" wide 100
expect "5-value rows" 'actor-critic targets are rows \[action, advantage, return\]' \
    train --model actor-critic --dataset "$work/wide/rollouts_x.npy" --epochs 1 --no-monitor
gen "$work/half" halfaction 100
expect "fractional action" 'rollouts_x.npy: sample 7: action 2.5 .*not a whole number' \
    train --model actor-critic --dataset "$work/half/rollouts_x.npy" --epochs 1 --no-monitor
expect "clip without old log-probabilities" "clip is PPO's" \
    train --model "$work/ppo.yaml" --dataset "$work/a2c/rollouts_x.npy" --epochs 1 --no-monitor
printf 'model: mlp\nentropy: 0.01\n' >"$work/mlp.yaml"
expect "entropy on another preset" 'mlp.yaml:2:1: entropy: applies to the actor-critic preset only' \
    train --model "$work/mlp.yaml" --dataset "$work/a2c/rollouts_x.npy" --epochs 1 --no-monitor

e2e_end
