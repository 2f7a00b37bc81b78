/* loop.c - stoke_trainer_run: the training loop. Each batch is a forward and backward
 * pass (train_batch); every `accumulate` batches an optimizer step (step), which may
 * evaluate within the epoch; at the end of the loader's epoch, epoch_end evaluates,
 * reports and checkpoints. One evaluate serves both. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train/fault.h"
#include "train/trainer.h"

/* The monitor's latest CPU and GPU figures into the event (NaN: unknown). */
static void utilization(stoke_trainer *t, stoke_train_event *e)
{
    e->cpu_pct = e->gpu_pct = NAN;
    stoke_mon_sample s;
    if (t->monitor && stoke_monitor_latest(t->monitor, &s)) {
        if (s.valid & STOKE_MS_PROC_CPU)
            e->cpu_pct = s.proc_cpu_pct;
        /* the monitor numbers GPUs as NVML does: the one training, found by PCI bus id */
        int gi = t->device != STOKE_TUNE_CPU ? stoke_machine_cuda_gpu(&t->machine, t->device) : 0;
        if (gi >= 0 && gi < s.gpu_count && (s.gpus[gi].s.valid & STOKE_GS_UTIL))
            e->gpu_pct = s.gpus[gi].s.util_gpu_pct;
    }
}

/* Seconds the training thread has waited for batches since the loader started. */
static double loader_wait_s(stoke_loader *l)
{
    stoke_loader_stats s;
    stoke_loader_get_stats(l, &s);
    return s.wait_avg_ms * (double)s.batches / 1000.0;
}

/* How the targets of d (the training or the validation set) feed "y"
 * (train_feed_targets). */
static train_targets targets_of(const stoke_trainer *t, const stoke_dataset *d)
{
    return (train_targets){t->info.target_dtype, t->target_elems, t->classes,
                           t->nclasses,          t->target_stage, stoke_dataset_path(d)};
}

/* A batch's inputs into the model: from the loader's device copy (the model's stream
 * waits on its event, then copies it on the device) or from host memory. */
static stoke_status train_feed_input(stoke_model *m, stoke_tensor x, stoke_loader *l,
                                     const stoke_batch *b)
{
    size_t bytes = (size_t)b->size * b->input_bytes;
    if (!b->on_device)
        return stoke_model_set_input(m, x, b->inputs, bytes);
    stoke_status s = stoke_loader_stream_wait(l, b, stoke_model_stream(m));
    return s == STOKE_OK ? stoke_model_set_input_device(m, x, b->inputs, bytes) : s;
}

/* The validation set's mean loss and metric with the training model's weights, on the
 * inference model (so the training trajectory is unchanged). NaN and 0 without one. */
static stoke_status evaluate_set(stoke_trainer *t, double *loss, double *metric, int64_t *count);

static stoke_status evaluate(stoke_trainer *t, double *loss, double *metric, int64_t *count)
{
    double t0 = stoke_wall_time();
    stoke_status s = evaluate_set(t, loss, metric, count);
    t->totals.eval_s += stoke_wall_time() - t0;
    return s;
}

static stoke_status evaluate_set(stoke_trainer *t, double *loss, double *metric, int64_t *count)
{
    *loss = *metric = NAN;
    *count = 0;
    if (!t->val_loader)
        return STOKE_OK;
    stoke_model *m = t->eval_model;
    stoke_status s = train_dist_buffers(t); /* every rank evaluates the same statistics */
    if (s == STOKE_OK)
        s = stoke_model_copy_params(m, t->model);
    if (s != STOKE_OK)
        return train_wrap_error(s, "validation");
    train_targets tg = targets_of(t, t->val_d);
    train_eval acc = {0};
    stoke_batch b;
    while ((s = stoke_loader_next(t->val_loader, &b)) == STOKE_OK && b.size > 0) {
        s = train_feed_input(m, t->x, t->val_loader, &b);
        if (s == STOKE_OK)
            s = train_eval_batch(m, t->y, t->metric, &tg, b.host_targets, b.samples, b.size, &acc);
        if (s != STOKE_OK)
            return train_wrap_error(s, "validation");
    }
    if (s != STOKE_OK || (s = train_dist_eval(t, &acc)) != STOKE_OK)
        return s;
    train_eval_means(&acc, t->metric != STOKE_NO_TENSOR, loss, metric, count);
    return STOKE_OK;
}

/* The monitor's rules over the run so far; each finding is reported once. */
static void monitor_warnings(stoke_trainer *t)
{
    if (!t->monitor)
        return;
    stoke_monitor_stop(t->monitor);
    stoke_mon_summary sum;
    if (stoke_mon_summarize(stoke_monitor_history(t->monitor), stoke_cpu_available(&t->machine.cpu),
                            &sum) == STOKE_OK) {
        /* The advice names stoke's own flags: the program watched is this trainer. */
        sum.program = (stoke_mon_program){.kind = STOKE_PROG_STOKE,
                                          .workers = t->workers,
                                          .threads = t->threads,
                                          .prefetch = t->decision.prefetch,
                                          .batch_size = t->cfg.batch_size,
                                          .accumulate = (int)t->cfg.accumulate};
        /* data parallel: every rank's step (gathered at the epoch's end), so a rank the
         * others wait for is named */
        sum.nranks = t->dist.nranks < STOKE_MON_MAX_RANKS ? t->dist.nranks : STOKE_MON_MAX_RANKS;
        if (sum.nranks > 0)
            memcpy(sum.ranks, t->dist.ranks, (size_t)sum.nranks * sizeof *sum.ranks);
        sum.stop_grace_known = t->dist.grace_known;
        sum.stop_grace_s = t->dist.grace_s;
        sum.eval_s = t->dist.eval_s;
        sum.checkpoint_s = t->dist.checkpoint_s;
        stoke_finding f[8];
        size_t n = stoke_diagnose(&sum, f, 8);
        for (size_t i = 0; i < n && i < 8; i++) {
            bool seen = false;
            for (int k = 0; k < t->nwarned; k++)
                seen |= !strcmp(t->warned[k], f[i].rule->id);
            if (seen || t->nwarned >= 16)
                continue;
            snprintf(t->warned[t->nwarned++], sizeof t->warned[0], "%s", f[i].rule->id);
            char text[1000];
            snprintf(text, sizeof text, "%s: %s; %s", f[i].rule->id, f[i].evidence, f[i].advice);
            stoke_train_event e = {.kind = STOKE_EV_WARNING,
                                   .text = text,
                                   .epoch = t->epoch,
                                   .rule = f[i].rule,
                                   .evidence = f[i].evidence,
                                   .advice = f[i].advice,
                                   .finding = &f[i]};
            train_emit(t, &e);
            /* the rules run at an epoch's end, after t->epoch moved on */
            train_log_finding(t, &f[i], t->epoch > 0 ? t->epoch - 1 : 0, stoke_wall_time());
        }
    }
    stoke_monitor_start(t->monitor);
}

/* Writes --checkpoint (if given) and says so. */
static stoke_status checkpoint(stoke_trainer *t)
{
    if (!t->cfg.checkpoint[0])
        return STOKE_OK;
    bool wrote = true;
    double t0 = stoke_wall_time();
    stoke_status s = train_dist_on(t) ? train_dist_save(t, t->cfg.checkpoint, &wrote)
                                      : stoke_trainer_save(t, t->cfg.checkpoint);
    if (s == STOKE_OK && wrote) {
        t->dist.checkpoint_s = stoke_wall_time() - t0; /* what a stop waits for (stop-grace) */
        stoke_train_event e = {.kind = STOKE_EV_CHECKPOINT,
                               .text = t->cfg.checkpoint,
                               .epoch = t->epoch,
                               .step = t->step};
        train_emit(t, &e);
    }
    return s;
}

/* After each evaluation: keeps the best metric and checks target_accuracy. True when
 * the target is reached (the event, the log record and the result say where). `batch`
 * is the epoch's batches done (= batches at its end). */
static bool check_target(stoke_trainer *t, double vl, double vm, int64_t vn, int64_t batch,
                         int64_t batches, double now)
{
    double *best = &t->result.best_val_metric;
    bool higher = !strcmp(t->metric_name, "acc");
    if (isfinite(vm) && (isnan(*best) || (higher ? vm > *best : vm < *best)))
        *best = vm;
    /* The accuracy is a mean of per-batch fractions: 9000 of 10000 right may come out a
     * rounding below 0.9, which must still count as reaching 90%. */
    if (!(t->cfg.target_accuracy > 0) || !(vm >= t->cfg.target_accuracy - 1e-9))
        return false;
    double el = now - t->loop_start;
    t->result.target_reached = true;
    t->result.target_epoch = t->epoch;
    t->result.target_step = t->step;
    t->result.target_elapsed_s = el;
    stoke_train_event e = {.kind = STOKE_EV_TARGET,
                           .epoch = t->epoch,
                           .epochs = t->cfg.epochs,
                           .batch = batch,
                           .batches = batches,
                           .step = t->step,
                           .metric = NAN,
                           .metric_name = t->metric_name,
                           .val_loss = vl,
                           .val_metric = vm,
                           .val_samples = vn,
                           .run_elapsed_s = el,
                           .target = t->cfg.target_accuracy,
                           .cpu_pct = NAN,
                           .gpu_pct = NAN};
    train_emit(t, &e);
    train_log_target(t, &e, now);
    return true;
}

/* An event of the loop with what every kind says: where the run is (the rest zero). */
static stoke_train_event loop_event(const stoke_trainer *t, stoke_train_event_kind kind,
                                    int64_t batches, double now)
{
    return (stoke_train_event){
        .kind = kind,
        .epoch = t->epoch,
        .epochs = t->cfg.epochs,
        .batch = t->ep_batches,
        .batches = batches,
        .step = t->step,
        .metric_name = t->metric_name,
        .run_elapsed_s = now - t->loop_start,
        /* a switch kept, not a trial's window */
        .threads = t->adapt.on && !t->adapt.a.base && t->adapt.a.switches > 0 ? t->adapt.a.cur : 0};
}

/* An evaluation within an epoch (every eval_every steps). It runs on the inference
 * model with its own loader, so the training trajectory is unchanged. *seconds: how
 * long it took; *reached: the target check's answer. */
static stoke_status eval_within_epoch(stoke_trainer *t, int64_t batches, double *seconds,
                                      bool *reached)
{
    double t0 = stoke_wall_time(), vl, vm;
    int64_t vn;
    stoke_status s = evaluate(t, &vl, &vm, &vn);
    if (s != STOKE_OK)
        return s;
    double now = stoke_wall_time();
    *seconds = now - t0;
    stoke_train_event e = loop_event(t, STOKE_EV_EVAL, batches, now);
    e.metric = NAN;
    e.val_loss = vl;
    e.val_metric = vm;
    e.val_samples = vn;
    e.elapsed_s = *seconds;
    e.cpu_pct = e.gpu_pct = NAN;
    train_emit(t, &e);
    train_log_eval(t, &e, now);
    t->result.val_loss = vl;
    t->result.val_metric = vm;
    *reached = check_target(t, vl, vm, vn, t->ep_batches, batches, now);
    return STOKE_OK;
}

/* An epoch's clock and the figures its progress is measured from. */
typedef struct epoch_clock {
    int64_t batches;       /* the loader's batches per epoch */
    double start;          /* when the epoch started (earlier by the part before a
                             * resume; later by the evaluations within it) */
    double wait0;          /* the loader's total wait at the start */
    int64_t samples_start; /* the epoch's samples before this part of the run */
    int last_decile;       /* the progress line's last tick, in tenths of the epoch */
    double last_emit;      /* when the last progress event went out (any epoch) */
} epoch_clock;

static void epoch_clock_start(stoke_trainer *t, epoch_clock *k)
{
    k->start = stoke_wall_time() - t->ep_elapsed_before;
    k->wait0 = loader_wait_s(t->loader);
    k->samples_start = t->ep_samples;
    k->last_decile = (int)(t->ep_batches * 10 / k->batches);
    memset(t->ph, 0, sizeof t->ph);
    memset(&t->waits, 0, sizeof t->waits);
    train_dist_epoch_start(t);
}

/* The epoch's running means so far (NaN before its first sample). */
static double epoch_loss(const stoke_trainer *t)
{
    return t->ep_samples ? t->ep_loss / (double)t->ep_samples : NAN;
}

static double epoch_metric(const stoke_trainer *t)
{
    return t->metric != STOKE_NO_TENSOR && t->ep_samples ? t->ep_metric / (double)t->ep_samples
                                                         : NAN;
}

/* The tests' fault seam (fault.h): none in a real run. */
static train_batch_fault_fn batch_fault;
static void *batch_fault_ctx;

void train_set_batch_fault(train_batch_fault_fn fn, void *ctx)
{
    batch_fault = fn;
    batch_fault_ctx = ctx;
}

/* Forward and backward over one batch; its loss and metric join the epoch's sums.
 * The phases are marked on the model's device: a GPU's backward is only queued, and
 * the host goes on to the next batch while it runs. */
static stoke_status train_batch(stoke_trainer *t, const stoke_batch *b, int accum)
{
    /* a test's fault: the batch fails as a workspace grown would */
    if (batch_fault) {
        stoke_status f = batch_fault(batch_fault_ctx, t->step, accum, b->size);
        if (f != STOKE_OK)
            return f;
    }
    stoke_model_mark(t->model, STOKE_PHASE_START);
    stoke_status s = train_feed_input(t->model, t->x, t->loader, b);
    train_targets tg = targets_of(t, t->train_d);
    if (s == STOKE_OK)
        s = train_feed_targets(t->model, t->y, &tg, b->host_targets, b->samples, b->size);
    stoke_model_mark(t->model, STOKE_PHASE_INPUT);
    if (s == STOKE_OK)
        s = stoke_model_forward(t->model, b->size, true); /* ends reading the losses */
    stoke_model_mark(t->model, STOKE_PHASE_FORWARD);
    if (s == STOKE_OK)
        s = stoke_model_backward(t->model);
    stoke_model_mark(t->model, STOKE_PHASE_BACKWARD);
    if (s != STOKE_OK)
        return s;
    double loss = stoke_model_loss(t->model);
    t->ep_loss += loss * (double)b->size;
    if (t->trial.on && t->step < t->trial.warmup + t->trial.min_steps) {
        t->trial.loss_sum += loss * (double)b->size;
        t->trial.loss_samples += (double)b->size;
    }
    if (t->metric != STOKE_NO_TENSOR)
        t->ep_metric += stoke_model_value(t->model, t->metric) * (double)b->size;
    t->ep_samples += b->size;
    t->ep_batches++;
    t->totals.samples += b->size;
    return STOKE_OK;
}

/* The step's phases as % of `ran` seconds (this part of the epoch), with the marks
 * completed so far (all of them when `wait`). */
/* The phases completed since the last call into the epoch's and the run's seconds. */
static void collect_phases(stoke_trainer *t, bool wait)
{
    double before[STOKE_PHASE_COUNT];
    memcpy(before, t->ph, sizeof before);
    stoke_model_phase_seconds(t->model, wait, t->ph);
    for (int p = 0; p < 4; p++)
        t->totals.phase_s[p] += t->ph[STOKE_PHASE_INPUT + p] - before[STOKE_PHASE_INPUT + p];
}

static void phases(stoke_trainer *t, stoke_train_event *e, double ran, bool wait)
{
    collect_phases(t, wait);
    double pct = ran > 0 ? 100.0 / ran : 0;
    e->input_pct = t->ph[STOKE_PHASE_INPUT] * pct;
    e->forward_pct = t->ph[STOKE_PHASE_FORWARD] * pct;
    e->backward_pct = t->ph[STOKE_PHASE_BACKWARD] * pct;
    e->optimizer_pct = t->ph[STOKE_PHASE_OPTIMIZER] * pct;
    train_dist_phases(t, e, pct);
}

/* The progress event after a step: shown at each tenth of the epoch and at most four
 * times a second otherwise. */

static void step_progress(stoke_trainer *t, epoch_clock *k, stoke_train_event *e, double now)
{
    double el = now - k->start;
    double ran = now - k->start - t->ep_elapsed_before + 1e-12; /* this part of the epoch */
    /* the world's: every rank steps with the same batch */
    e->samples_per_s =
        el > 0 ? (double)train_world(t) * (double)(t->ep_samples - k->samples_start) / ran : 0;
    e->data_wait_pct = el > 0 ? 100.0 * (loader_wait_s(t->loader) - k->wait0) / ran : 0;
    phases(t, e, ran, false);
    e->eta_s =
        t->ep_batches > 0 ? el * (double)(k->batches - t->ep_batches) / (double)t->ep_batches : 0;
    int decile = (int)(t->ep_batches * 10 / k->batches);
    e->tick = decile > k->last_decile && t->ep_batches < k->batches;
    if (e->tick || now - k->last_emit >= 0.25) {
        utilization(t, e);
        train_emit(t, e);
        k->last_emit = now;
        k->last_decile = decile;
    }
}

void train_trial_step(stoke_trainer *t)
{
    train_trial *r = &t->trial;
    if (!isfinite(t->ep_loss))
        r->finite = false;
    if (!r->marked && t->step >= r->warmup) {
        /* the window starts here: what came before was warming caches, pools and
         * the loader's ring */
        r->marked = true;
        r->t0 = stoke_wall_time();
        r->step0 = t->step;
        stoke_loader_get_stats(t->loader, &r->s0);
        return;
    }
    double now = stoke_wall_time();
    if (r->marked && ((t->step - r->step0 >= r->min_steps && now - r->t0 >= r->seconds) ||
                      t->step >= r->max_steps)) {
        r->done = true;
        r->t1 = now;
    }
}

/* ---- the compute threads during the run (adapt.h) ---------------------------------- */

void train_adapt_start(stoke_trainer *t)
{
    struct train_adapt *ad = &t->adapt;
    double now = stoke_wall_time();
    adapt_params p;
    adapt_default_params(&p);
    adapt_init(&ad->a, &p, ad->max, t->threads, now);
    adapt_pause(&ad->a, now);
    ad->samples = t->totals.samples;
    ad->others = NAN;
    ad->snap_t = now;
    if (stoke_cpu_snapshot_read(NULL, &ad->snap) != STOKE_OK)
        ad->snap.valid = false; /* no /proc/stat: the step times alone decide */
}

void train_adapt_pause(stoke_trainer *t)
{
    if (t->adapt.on)
        adapt_pause(&t->adapt.a, stoke_wall_time());
}

static void set_threads(stoke_trainer *t, int n)
{
    stoke_model_set_threads(t->model, n);
    if (t->eval_model)
        stoke_model_set_threads(t->eval_model, n);
    t->threads = n;
}

void train_adapt_step(stoke_trainer *t, double now)
{
    struct train_adapt *ad = &t->adapt;
    if (!ad->on)
        return;
    /* the other processes' cores, over the last half second or more */
    if (ad->snap.valid && now - ad->snap_t >= 0.5) {
        stoke_cpu_snapshot b;
        stoke_cpu_load l;
        if (stoke_cpu_snapshot_read(NULL, &b) == STOKE_OK) {
            if (stoke_cpu_load_between(&ad->snap, &b, &l))
                ad->others = l.others_cpus;
            ad->snap = b;
            ad->snap_t = now;
        }
    }
    int64_t n = t->totals.samples - ad->samples;
    ad->samples = t->totals.samples;
    adapt_result r;
    adapt_action act = adapt_step(&ad->a, now, n, ad->others, &r);
    if (act == ADAPT_NONE)
        return;
    set_threads(t, r.threads);
    if (act == ADAPT_TRY)
        return;
    train_log_threads(t, &r, now);
    if (act == ADAPT_KEEP)
        train_info(t, "%s", r.reason);
}

/* An optimizer step over the `accum` batches accumulated, its progress event and log
 * record, and an evaluation when --eval-every asks for one. *reached: the target
 * accuracy was reached (the run stops). */
static stoke_status step(stoke_trainer *t, epoch_clock *k, int accum, bool *reached)
{
    const stoke_train_config *c = &t->cfg;
    *reached = false;
    double lr = stoke_lr_at(&t->sched, t->step);
    bool applied = true;
    /* asked only for the log's records: on a GPU asking waits for the step */
    bool logged = (t->step + 1) % c->log_every == 0;
    stoke_status s = stoke_model_step(t->model, lr, accum, logged ? &applied : NULL);
    stoke_model_mark(t->model, STOKE_PHASE_OPTIMIZER);
    if (s != STOKE_OK)
        return s;
    t->step++;
    if (t->trial.on)
        train_trial_step(t);
    double now = stoke_wall_time();
    train_adapt_step(t, now);
    stoke_train_event e = loop_event(t, STOKE_EV_PROGRESS, k->batches, now);
    e.loss = epoch_loss(t);
    e.metric = epoch_metric(t);
    e.lr = lr;
    e.elapsed_s = now - k->start;
    step_progress(t, k, &e, now);
    if (t->step % c->log_every == 0)
        train_log_step(t, &e, now, stoke_model_loss(t->model), applied);
    /* --eval-every: not on the step that ends the epoch (all its batches are done),
     * whose evaluation is the epoch's own. */
    if (c->eval_every > 0 && t->step % c->eval_every == 0 && t->ep_batches < k->batches) {
        double eval_s;
        if ((s = eval_within_epoch(t, k->batches, &eval_s, reached)) != STOKE_OK)
            return s;
        k->start += eval_s; /* the epoch's figures count training time only */
        train_adapt_pause(t);
    }
    return STOKE_OK;
}

/* After the first epoch on a GPU (or the run, if shorter), once: whether its steps
 * replay captured graphs. */
static void say_graphs(stoke_trainer *t)
{
    if (t->graphs_said || !stoke_model_on_device(t->model))
        return;
    t->graphs_said = true;
    const char *why = NULL;
    int n = stoke_model_graphs(t->model, &why);
    if (*why)
        train_info(t, "CUDA graphs: off, every kernel is launched on its own (%s)", why);
    else
        train_info(t,
                   "CUDA graphs: %d captured (a forward and a backward per batch size, the "
                   "optimizer's updates), replayed at every step after the first",
                   n);
}

/* The loader's epoch is over: evaluation, the epoch's event and record, the checkpoint
 * and the monitor's warnings. *done: the last epoch, or the target reached. */
static stoke_status epoch_end(stoke_trainer *t, epoch_clock *k, bool *done)
{
    const stoke_train_config *c = &t->cfg;
    double ev0 = stoke_wall_time(), el = ev0 - k->start;
    double vl, vm;
    int64_t vn;
    stoke_status s = evaluate(t, &vl, &vm, &vn);
    if (s != STOKE_OK)
        return s;
    double end = stoke_wall_time();
    t->dist.eval_s = end - ev0; /* what a stop during it waits for (stop-grace) */
    double run_el = el - t->ep_elapsed_before;
    double wait = loader_wait_s(t->loader) - k->wait0;
    /* the epoch's figures over the world: its sums, its samples in this part */
    double loss_sum = t->ep_loss, metric_sum = t->ep_metric;
    int64_t samples = t->ep_samples, since = t->ep_samples - k->samples_start;
    if ((s = train_dist_sums(t, &loss_sum, &metric_sum, &samples, &since)) != STOKE_OK ||
        (s = train_dist_gather(t, run_el, wait)) != STOKE_OK)
        return s;
    stoke_train_event e = loop_event(t, STOKE_EV_EPOCH, k->batches, end);
    e.loss = samples ? loss_sum / (double)samples : NAN;
    e.metric = t->metric != STOKE_NO_TENSOR && samples ? metric_sum / (double)samples : NAN;
    e.lr = stoke_lr_at(&t->sched, t->step);
    e.elapsed_s = el;
    e.val_loss = vl;
    e.val_metric = vm;
    e.val_samples = vn;
    e.samples_per_s = run_el > 0 ? (double)since / run_el : 0;
    e.data_wait_pct = run_el > 0 ? 100.0 * wait / run_el : 0;
    /* MFU is each rank's against its own device's peak */
    e.mfu_pct = train_peak_mfu(t, e.samples_per_s / train_world(t), t->epoch);
    e.peak_flops = t->peak.flops;
    e.peak_source = t->peak.label;
    phases(t, &e, run_el, true);
    utilization(t, &e);
    train_emit(t, &e);
    train_log_epoch(t, &e, end);
    say_graphs(t);
    t->result.train_loss = e.loss;
    t->result.val_loss = vl;
    t->result.val_metric = vm;
    bool reached = check_target(t, vl, vm, vn, k->batches, k->batches, end);
    t->epoch++;
    t->result.epochs_done = t->epoch;
    t->ep_loss = t->ep_metric = 0;
    t->ep_samples = t->ep_batches = 0;
    t->ep_elapsed_before = 0;
    if ((s = checkpoint(t)) != STOKE_OK)
        return s;
    monitor_warnings(t); /* after the checkpoint: the stop-grace rule reads its time */
    *done = t->epoch >= c->epochs || reached;
    if (!*done)
        epoch_clock_start(t, k);
    train_adapt_pause(t); /* the evaluation and the checkpoint were not a step */
    return STOKE_OK;
}

/* Where an optimizer step started: the sampler's position and the epoch's sums. */
typedef struct step_start {
    stoke_sampler_state at;
    double loss, metric;
    int64_t samples;
} step_start;

/* A batch whose memory could not be allocated (a workspace grown, an arena): the
 * step restarts where it started at half the micro-batch and twice the accumulation
 * (train_halve_batch keeps the weights, optimizer state and step count): no sample is
 * lost or counted twice, and the effective batch is the same. */
static stoke_status restart_halved(stoke_trainer *t, epoch_clock *k, const step_start *from)
{
    char why[400];
    snprintf(why, sizeof why, "%s", stoke_last_error());
    if (train_dist_on(t)) /* the ranks would have to halve together */
        return stoke_fail(STOKE_ERR_NOMEM,
                          "rank %d: %s (in a data parallel run the batch is not halved: give "
                          "--batch-size %" PRId64 " or less to every rank)",
                          train_rank(t), why, t->cfg.batch_size / 2);
    double wait = loader_wait_s(t->loader) - k->wait0;
    stoke_status s = train_halve_batch(t, from->at, why);
    if (s != STOKE_OK)
        return s;
    int64_t bs = t->cfg.batch_size;
    t->ep_loss = from->loss;
    t->ep_metric = from->metric;
    t->ep_samples = from->samples;
    t->ep_batches = (from->samples + bs - 1) / bs;
    k->batches = train_epoch_batches(t);
    k->wait0 = -wait; /* the new loader's waits add to the old one's */
    k->last_decile = (int)(t->ep_batches * 10 / k->batches);
    return STOKE_OK;
}

/* Batches until the last epoch ends, the target is reached, max_steps is reached or
 * *stop is set (these two only between optimizer steps). *mid_epoch: it stopped
 * within an epoch (the run's end then saves the position). */
static stoke_status loop(stoke_trainer *t, epoch_clock *k, const volatile int *stop,
                         bool *mid_epoch)
{
    const stoke_train_config *c = &t->cfg;
    int accum = 0;         /* batches since the last optimizer step */
    step_start from = {0}; /* where that step started: it restarts there at half the batch */
    for (;;) {
        if (accum == 0) {
            bool end =
                (stop && *stop) || (c->max_steps > 0 && t->step >= c->max_steps) || t->trial.done;
            stoke_status ds = train_dist_stop(t, &end); /* a stop any rank asked for */
            if (ds != STOKE_OK)
                return ds;
            if (end) {
                t->result.interrupted = true;
                return STOKE_OK;
            }
        }
        if (accum == 0)
            from = (step_start){stoke_loader_state(t->loader), t->ep_loss, t->ep_metric,
                                t->ep_samples};
        stoke_batch b;
        stoke_status s = stoke_loader_next(t->loader, &b);
        if (s != STOKE_OK)
            return s;
        if (b.size > 0) {
            stoke_wait_hist_add(&t->waits, b.wait_ms); /* what data_wait_pct sums */
            /* the step's last micro-batch all-reduces the accumulated sum */
            train_dist_set_sync(t, accum + 1 >= c->accumulate);
            s = train_batch(t, &b, accum);
            if (s == STOKE_ERR_NOMEM) {
                if ((s = restart_halved(t, k, &from)) != STOKE_OK)
                    return s;
                accum = 0;
                continue;
            }
            if (s != STOKE_OK)
                return s;
            if (++accum < c->accumulate)
                continue;
        }
        /* a step after `accumulate` batches, or over the epoch's last few */
        if (accum > 0) {
            bool reached;
            s = step(t, k, accum, &reached);
            accum = 0;
            if (s != STOKE_OK || reached) {
                *mid_epoch = reached;
                return s;
            }
        }
        if (b.size > 0)
            continue;
        bool done; /* b.size == 0: the loader's epoch is over */
        if ((s = epoch_end(t, k, &done)) != STOKE_OK || done)
            return s;
    }
}

stoke_status stoke_trainer_run(stoke_trainer *t, const volatile int *stop)
{
    const stoke_train_config *c = &t->cfg;
    double run_start = stoke_wall_time();
    if (!t->loader) { /* resumed a finished run */
        t->result.epochs_done = t->epoch;
        t->result.steps = t->step;
        return STOKE_OK;
    }
    if (t->monitor)
        stoke_monitor_start(t->monitor);
    epoch_clock k = {.batches = train_epoch_batches(t)};
    t->loop_start = stoke_wall_time();
    train_log_start(t, (k.batches + c->accumulate - 1) / c->accumulate);
    if (t->log_error[0]) { /* not even the first record: nothing has been trained yet */
        if (t->monitor)
            stoke_monitor_stop(t->monitor);
        return stoke_fail(STOKE_ERR_IO,
                          "log: %s (before the first step: nothing was "
                          "trained)",
                          t->log_error);
    }
    /* the first step (and the loader's first batches) can take seconds at a large
     * batch: the last silence before the first progress line, said */
    int64_t steps = (k.batches + c->accumulate - 1) / c->accumulate;
    if (!t->trial.on)
        train_info(t,
                   "training: %" PRId64 " step%s an epoch at batch %" PRId64
                   "; the first progress line follows the first step...",
                   steps, steps == 1 ? "" : "s", c->batch_size);
    epoch_clock_start(t, &k);
    if (t->adapt.on)
        train_adapt_start(t);
    bool mid_epoch = false; /* the target was reached within an epoch */
    stoke_status s = loop(t, &k, stop, &mid_epoch);
    if (t->monitor)
        stoke_monitor_stop(t->monitor);
    if (s == STOKE_OK)
        say_graphs(t); /* a run shorter than an epoch */
    t->result.steps = t->step;
    t->result.metric_name = t->metric_name;
    t->result.seconds = stoke_wall_time() - run_start;
    if (s == STOKE_OK && (t->result.interrupted || mid_epoch)) {
        t->ep_elapsed_before = stoke_wall_time() - k.start;
        s = checkpoint(t);
    }
    stoke_status ls = train_log_finish(t);
    return s != STOKE_OK ? s : ls;
}

void stoke_trainer_totals(stoke_trainer *t, stoke_train_totals *out)
{
    if (t->model)
        collect_phases(t, true);
    t->totals.steps = t->step;
    t->totals.loader_wait_s = t->loader ? loader_wait_s(t->loader) : 0;
    t->totals.step_flops = t->step_flops;
    t->totals.peak_flops = t->peak.flops;
    *out = t->totals;
}

void stoke_trainer_set_max_steps(stoke_trainer *t, int64_t steps) { t->cfg.max_steps = steps; }
