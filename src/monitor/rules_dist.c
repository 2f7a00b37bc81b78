/* rules_dist.c - the rules of a data-parallel run: one rank the others wait for at the
 * gradients' all-reduce (a straggler, input- or compute-bound), the all-reduce itself
 * exposed on every rank, and a Ctrl-C on mpirun that would kill the ranks before the
 * checkpoint is saved. They read the trainer's per-rank step figures (the summary's
 * ranks), which only a run of several ranks has. */
#include "monitor/rules_impl.h"

#include <math.h>
#include <stdlib.h>

#include "core/text.h"

/* The ranks' figures when every rank reported usable ones: at least two ranks, each
 * with steps, a positive step time and finite, non-negative parts. One rank without
 * them could be the very one the others wait for, so then nothing is judged. */
static bool ranks_usable(const stoke_mon_summary *s)
{
    if (s->nranks < 2 || s->nranks > STOKE_MON_MAX_RANKS)
        return false;
    for (int k = 0; k < s->nranks; k++) {
        const stoke_mon_rank *x = &s->ranks[k];
        if (x->steps <= 0 || !(x->step_s > 0) || !isfinite(x->step_s) || !(x->input_wait_s >= 0) ||
            !isfinite(x->input_wait_s) || !(x->compute_s >= 0) || !isfinite(x->compute_s) ||
            !(x->reduce_wait_s >= 0) || !isfinite(x->reduce_wait_s))
            return false;
    }
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n), n > 0 (v is sorted in place). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double pct(double part, double whole) { return 100.0 * part / whole; }

/* How the ranks stand at the all-reduce: the rank that waits least there, and the
 * medians over the other ranks of their wait, input wait (both % of their step) and
 * compute (s). */
typedef struct rank_view {
    int slow; /* index into s->ranks */
    double wait_pct, input_pct;
    double others_wait_pct, others_wait_s, others_input_pct, others_compute_s;
    double min_wait_pct, median_wait_pct, median_step_s, median_compute_s; /* every rank */
} rank_view;

static void view_ranks(const stoke_mon_summary *s, rank_view *v)
{
    double w[STOKE_MON_MAX_RANKS], ws[STOKE_MON_MAX_RANKS], in[STOKE_MON_MAX_RANKS],
        c[STOKE_MON_MAX_RANKS], all[STOKE_MON_MAX_RANKS], all_step[STOKE_MON_MAX_RANKS],
        all_compute[STOKE_MON_MAX_RANKS];
    int n = s->nranks, m = 0;
    v->slow = 0;
    for (int k = 1; k < n; k++)
        if (pct(s->ranks[k].reduce_wait_s, s->ranks[k].step_s) <
            pct(s->ranks[v->slow].reduce_wait_s, s->ranks[v->slow].step_s))
            v->slow = k;
    for (int k = 0; k < n; k++) {
        const stoke_mon_rank *x = &s->ranks[k];
        all[k] = pct(x->reduce_wait_s, x->step_s);
        all_step[k] = x->step_s;
        all_compute[k] = x->compute_s;
        if (k == v->slow)
            continue;
        w[m] = all[k];
        ws[m] = x->reduce_wait_s;
        in[m] = pct(x->input_wait_s, x->step_s);
        c[m++] = x->compute_s;
    }
    const stoke_mon_rank *x = &s->ranks[v->slow];
    v->wait_pct = pct(x->reduce_wait_s, x->step_s);
    v->input_pct = pct(x->input_wait_s, x->step_s);
    v->others_wait_pct = median(w, m);
    v->others_wait_s = median(ws, m);
    v->others_input_pct = median(in, m);
    v->others_compute_s = median(c, m);
    v->median_wait_pct = median(all, n);
    v->median_step_s = median(all_step, n);
    v->median_compute_s = median(all_compute, n);
    v->min_wait_pct = all[0]; /* sorted by median() */
}

/* The others wait a large share of their step while one rank waits far less: they
 * wait for it. */
static bool straggles(const stoke_rule *r, const rank_view *v)
{
    return v->others_wait_pct >= r->reduce_wait_atleast &&
           v->wait_pct <= r->wait_ratio_below * v->others_wait_pct;
}

/* The straggler's loader is too slow: more workers, a deeper ring, faster storage. */
static void input_advice(const stoke_mon_summary *s, stoke_finding *f, const rank_view *v,
                         const char *host)
{
    /* To keep up, its pipeline must produce 1/(1 - wait share) times as fast. */
    double share = v->input_pct < 99 ? v->input_pct / 100.0 : 0.99;
    double cur = rule_current_workers(s), slots = rule_current_prefetch(s);
    char workers[96], prefetch[112] = "";
    if (isnan(cur)) {
        rule_change(f, "workers", "workers", NAN, NAN, +1);
        stoke_say(workers, sizeof workers, "more loader workers (%s)",
                  rule_is_stoke(s) ? "--workers" : "DataLoader(num_workers=...)");
    } else {
        int have = cur > 0 ? (int)cur : 1;
        int need = (int)ceil(have / (1.0 - share));
        if (need <= cur)
            need = (int)cur + 1;
        char knob[96];
        rule_more_workers(f, s, need);
        stoke_say(workers, sizeof workers, "%d loader workers, %s (now %d)", need,
                  rule_workers_knob(s, need, knob, sizeof knob), (int)cur);
    }
    if (!isnan(slots) && slots > 0) {
        char knob[96];
        int deeper = (int)rule_change(f, "prefetch", "batches", slots, 2 * slots, +1);
        stoke_say(prefetch, sizeof prefetch, ", a deeper ring (%s)",
                  rule_prefetch_knob(s, deeper, isnan(cur) ? 0 : (int)cur, knob, sizeof knob));
    }
    rule_change_to(f, "data_location", "tmpfs");
    stoke_say(f->advice, sizeof f->advice,
              "its loader cannot keep up (its pipeline must be %.1fx as fast): give it %s%s, or "
              "faster storage on %s (the dataset on local SSD or tmpfs /dev/shm); the settings "
              "apply to every rank, whose loaders then idle a little more",
              rule_fig(f, "speedup_needed", 1.0 / (1.0 - share), "x"), workers, prefetch, host);
}

/* The straggler computes longer than the others: its host is loaded or slower. */
static void compute_advice(const stoke_mon_summary *s, stoke_finding *f, const char *host)
{
    rule_change(f, "host_load", "", NAN, NAN, -1);
    rule_change(f, "ranks_on_host", "ranks", NAN, NAN, -1);
    stoke_say(f->advice, sizeof f->advice,
              "check %s's load (other processes on its cores, throttled clocks: watch it with "
              "stoke monitor) and that the rank's compute threads fit the cores it was given "
              "(%s); if that host is simply slower, give it a smaller share: fewer ranks on it "
              "(fewer slots in the hostfile)",
              host, rule_is_stoke(s) ? "--threads" : "OMP_NUM_THREADS, torch.set_num_threads");
}

bool rule_check_rank_straggler(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    if (!ranks_usable(s))
        return false;
    rank_view v;
    view_ranks(s, &v);
    if (!straggles(r, &v))
        return false;
    const stoke_mon_rank *x = &s->ranks[v.slow];
    f->rank = x->rank;
    stoke_say(f->host, sizeof f->host, "%.63s", x->host);
    const char *host = f->host[0] ? f->host : "its host";
    /* The other ranks that also wait little are slow too (a slow host with two ranks):
     * they are counted, the one waiting least is named. */
    int slow = 0;
    for (int k = 0; k < s->nranks; k++)
        slow += pct(s->ranks[k].reduce_wait_s, s->ranks[k].step_s) <=
                r->wait_ratio_below * v.others_wait_pct;
    rule_fig(f, "ranks", s->nranks, "");
    rule_fig(f, "rank", x->rank, "");
    rule_fig(f, "slow_ranks", slow, "");
    double step = rule_fig(f, "step_s", x->step_s, "s");
    double wait = rule_fig(f, "reduce_wait_pct", v.wait_pct, "%");
    double others = rule_fig(f, "others_reduce_wait_pct", v.others_wait_pct, "%");
    double others_s = rule_fig(f, "others_reduce_wait_s", v.others_wait_s, "s");
    double in = rule_fig(f, "input_wait_pct", v.input_pct, "%");
    double others_in = rule_fig(f, "others_input_wait_pct", v.others_input_pct, "%");
    double comp = rule_fig(f, "compute_s", x->compute_s, "s");
    double others_comp = rule_fig(f, "others_compute_s", v.others_compute_s, "s");
    char also[48] = "";
    if (slow > 1)
        stoke_say(also, sizeof also, " (%d ranks wait that little)", slow);
    bool input = in - others_in >= r->input_wait_atleast;
    char why[160];
    if (input)
        stoke_say(why, sizeof why,
                  "it waits for its batches %.0f%% of its step against %.0f%% on the others: "
                  "it is input-bound",
                  in, others_in);
    else
        stoke_say(why, sizeof why,
                  "it computes %.4f s per step against %.4f s on the others (%.2fx) and waits "
                  "for its batches %.0f%% of its step (others %.0f%%): it is compute-bound",
                  comp, others_comp,
                  rule_fig(f, "compute_ratio", others_comp > 0 ? comp / others_comp : 1.0, "x"), in,
                  others_in);
    stoke_say(f->evidence, sizeof f->evidence,
              "rank %d on %s waits %.0f%% of its %.4f s step at the gradients' all-reduce while "
              "the other %d ranks wait %.0f%% (median, %.4f s): they wait for it%s; %s",
              x->rank, host, wait, step, s->nranks - 1, others, others_s, also, why);
    if (input)
        input_advice(s, f, &v, host);
    else
        compute_advice(s, f, host);
    return true;
}

bool rule_check_allreduce_exposed(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    if (!ranks_usable(s))
        return false;
    rank_view v;
    view_ranks(s, &v);
    /* One rank that waits far less is rank-straggler's: the others wait for it, not for
     * the network. */
    if (straggles(r, &v) || v.min_wait_pct < r->reduce_wait_atleast)
        return false;
    rule_fig(f, "ranks", s->nranks, "");
    double least = rule_fig(f, "reduce_wait_pct_min", v.min_wait_pct, "%");
    double w = rule_fig(f, "reduce_wait_pct_median", v.median_wait_pct, "%");
    double step = rule_fig(f, "step_s_median", v.median_step_s, "s");
    double comp = rule_fig(f, "compute_s_median", v.median_compute_s, "s");
    stoke_say(f->evidence, sizeof f->evidence,
              "every one of the %d ranks waits at the gradients' all-reduce: at least %.0f%% of "
              "its step (median %.0f%% of %.4f s, against %.4f s of compute): the reduction is "
              "not hidden behind backward",
              s->nranks, least, w, step, comp);
    /* Accumulating k micro-batches per step keeps the wait per step and multiplies the
     * rest: the share falls to w / (w + (1 - w) k); k brings it under the threshold. */
    double t = r->reduce_wait_atleast / 100.0, ws = fmin(w / 100.0, 0.99);
    int k = (int)ceil(ws * (1 - t) / (t * (1 - ws)));
    if (k < 2)
        k = 2;
    double cur = rule_is_stoke(s) && s->program.accumulate > 0 ? s->program.accumulate : NAN;
    double to = rule_change(f, "grad_accum_steps", "steps", cur, isnan(cur) ? NAN : cur * k, +1);
    rule_change(f, "interconnect", "", NAN, NAN, +1);
    const char *net = "a faster interconnect between the ranks (across hosts InfiniBand or RoCE "
                      "rather than TCP)";
    if (rule_is_stoke(s)) {
        char accum[48];
        if (isnan(to))
            stoke_say(accum, sizeof accum, "--accumulate %d", k);
        else
            stoke_say(accum, sizeof accum, "--accumulate %d (now %d)", (int)to, (int)cur);
        stoke_say(f->advice, sizeof f->advice,
                  "fewer all-reduces per sample: accumulate %dx more backward passes per step, "
                  "%s (one all-reduce per step; the effective batch grows as much: mind the "
                  "learning rate); and %s",
                  k, accum, net);
    } else {
        rule_change(f, "bucket_size", "MB", NAN, NAN, +1);
        stoke_say(f->advice, sizeof f->advice,
                  "fewer, larger gradient buckets so more of the reduction overlaps backward "
                  "(DistributedDataParallel(bucket_cap_mb=...) above its 25 MB default); "
                  "gradient accumulation, about %dx (no_sync() on all but the last micro-batch: "
                  "one all-reduce per step; the effective batch grows as much); and %s",
                  k, net);
    }
    return true;
}

/* OpenMPI 4's mpirun, on Ctrl-C (or a SIGTERM to it), sends each rank SIGCONT, waits its
 * odls_base_sigkill_timeout, sends SIGTERM, waits as long again and sends SIGKILL. The
 * ranks stop at the next step they agree on and rank 0 saves the checkpoint; the worst
 * case is a SIGTERM just after a step began (its rest, then the checkpoint) or during an
 * epoch's evaluation (its rest, the epoch's checkpoint, then the stop's). */
bool rule_check_stop_grace(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    (void)r;
    if (!s->stop_grace_known || !ranks_usable(s) || !(s->checkpoint_s > 0) ||
        !isfinite(s->checkpoint_s) || !(s->stop_grace_s >= 0) || !isfinite(s->stop_grace_s) ||
        !(s->eval_s >= 0) || !isfinite(s->eval_s))
        return false;
    int slow = 0;
    for (int k = 1; k < s->nranks; k++)
        if (s->ranks[k].step_s > s->ranks[slow].step_s)
            slow = k;
    double step_s = s->ranks[slow].step_s, ck = s->checkpoint_s;
    double need = fmax(step_s + ck, s->eval_s + 2 * ck);
    if (need <= s->stop_grace_s)
        return false;
    rule_fig(f, "stop_grace_s", s->stop_grace_s, "s");
    rule_fig(f, "step_s", step_s, "s");
    rule_fig(f, "eval_s", s->eval_s, "s");
    rule_fig(f, "checkpoint_s", ck, "s");
    rule_fig(f, "stop_needs_s", need, "s");
    /* twice the need, in whole seconds (mpirun reads an integer): room for a slower
     * step than the epoch's mean */
    int grace = (int)ceil(2 * need);
    if (grace <= s->stop_grace_s)
        grace = (int)floor(s->stop_grace_s) + 1;
    rule_change(f, "stop_grace", "s", s->stop_grace_s, grace, +1);
    stoke_say(f->evidence, sizeof f->evidence,
              "on Ctrl-C mpirun gives each rank %.0f s from its SIGTERM to its SIGKILL "
              "(odls_base_sigkill_timeout), but a stop here needs up to %.2f s: the rest of a "
              "%.2f s step (rank %d's) or of the %.2f s evaluation, and the %.2f s checkpoint; "
              "the ranks would be killed and the steps since the last checkpoint lost",
              s->stop_grace_s, need, step_s, s->ranks[slow].rank, s->eval_s, ck);
    stoke_say(f->advice, sizeof f->advice,
              "give mpirun --mca odls_base_sigkill_timeout %d (or set "
              "OMPI_MCA_odls_base_sigkill_timeout=%d, which `stoke train --nproc` passes on); "
              "a Ctrl-C then takes about %d s: mpirun waits as long before its SIGTERM too",
              grace, grace, 2 * grace);
    return true;
}
