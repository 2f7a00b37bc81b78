/* cmd_train.c - `stoke train`: settings from defaults < --config file < environment <
 * flags, the progress line (in place on a terminal, every 10% otherwise), checkpoints
 * on SIGINT/SIGTERM, and --dry-run's memory plan. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/tmpfile.h"
#include "stoke/dist.h"
#include "stoke/monitor.h"
#include "stoke/train.h"

void cmd_train_usage(void)
{
    printf("usage: stoke train [options]\n\n"
           "Trains a model on a dataset, tuned for the machine: precision, loader workers and\n"
           "compute threads are decided from `stoke probe` and printed. With no options it\n"
           "trains the cnn preset on Fashion-MNIST for 3 epochs (>= 90%% test accuracy).\n\n"
           "  --dataset PATH        training data (default /usr/share/datasets/fashion-mnist)\n"
           "  --val-dataset PATH    validation data (default: the dataset's test split)\n"
           "  --model NAME|FILE     preset (mlp, cnn, resnet, transformer, actor-critic) or a\n"
           "                        YAML model file (docs/train.md); default cnn\n"
           "  --hidden N,N,...      mlp / actor-critic hidden sizes (default 512,512 / 64,64)\n"
           "  --epochs N            default 3\n"
           "  --batch-size N|auto   default 128 (env BATCH_SIZE); auto: measured by short\n"
           "                        trials (--tune) from the rule's batch: the largest whose\n"
           "                        plan fits --memory-safety x the free memory, a power of\n"
           "                        two (--batch-pow2=false: not), at most 2%% of the samples\n"
           "                        (50 optimizer steps an epoch; without --effective-batch)\n"
           "                        and on the CPU at most 256; the trials go no higher than\n"
           "                        the fit and the 2%%\n"
           "  --memory-safety X     batch auto's share of the free memory (default 0.7)\n"
           "  --effective-batch N   accumulate ceil(N / batch) backward passes per step (env\n"
           "                        EFFECTIVE_BATCH; not with --accumulate)\n"
           "  --val-batch-size N    default 256 (env VAL_BATCH_SIZE)\n"
           "  --accumulate N        backward passes per optimizer step (effective batch;\n"
           "                        env ACCUMULATE)\n"
           "  --workers N|auto      loader threads (env NUM_WORKERS; default auto: 0 for data\n"
           "                        held in memory with a fused transform, else the probe's\n"
           "                        loader_workers)\n"
           "  --prefetch N|auto     batches in flight (env PREFETCH_FACTOR; default auto: 2 x\n"
           "                        workers within [2, 32], the probe's prefetch_depth rule)\n"
           "  --threads N|auto      compute threads (default auto: available CPUs - cores\n"
           "                        other processes are busy on - workers)\n"
           "  --tune M              how settings given as auto are decided: trials (default:\n"
           "                        the tuning cache, else short trials first), cache (the\n"
           "                        cache, else the rules: no trials) or off (the rules)\n"
           "                        (env STOKE_TUNE; docs/tune.md)\n"
           "  --loader-delay-us N   test/benchmark knob: each training sample costs N us more\n"
           "                        CPU to load (a slow decode; default 0; docs/bench.md)\n"
           "  --nproc N             data parallel on this machine: N ranks under OpenMPI's\n"
           "                        mpirun, each on its share of every epoch and of the CPUs\n"
           "                        (or run `mpirun -np N stoke train ...` yourself; several\n"
           "                        machines and GPUs: docs/distributed.md)\n"
           "  --device D            auto (a GPU when the CUDA backend can run on it, else the\n"
           "                        CPU), cpu, cuda, cuda:N (env STOKE_DEVICE)\n"
           "  --precision P         auto (the probe's rule), fp32, bf16, fp16 (env PRECISION;\n"
           "                        AMP=true is bf16, AMP=false fp32)\n"
           "  --recompute [M]       gradient checkpointing: keep only the activations between\n"
           "                        segments of the model and recompute the rest in backward\n"
           "                        (same numbers, ~1/3 more compute, less memory); M is on\n"
           "                        (the flag alone), off (default) or auto (on only when the\n"
           "                        models would not fit otherwise, before a smaller batch)\n"
           "                        (env STOKE_RECOMPUTE)\n"
           "  --optimizer O         sgd (default, momentum 0.9) or adamw\n"
           "  --lr X                learning rate (default 0.05)\n"
           "  --momentum X, --nesterov, --weight-decay X, --clip-norm X\n"
           "  --schedule S          cosine (default, to --min-lr over the run), constant, step;\n"
           "                        --warmup-steps N, --step-size N,\n"
           "                        --gamma X, --min-lr X\n"
           "  --augment             augment images: random crop (pad 2) and horizontal flip\n"
           "  --transforms crop|rrc the augmentation: crop (default) or rrc (random resized\n"
           "                        crop + flip on the original images; evaluation on centre\n"
           "                        crops); crop+jitter, rrc+jitter add a color jitter\n"
           "  --seed N              shuffling, augmentation, initialization (default 1)\n"
           "  --limit N             train on the first N samples; --val-limit N likewise\n"
           "  --max-steps N         stop after N optimizer steps (checkpoint as on SIGINT)\n"
           "  --eval-every N        also evaluate every N optimizer steps (default: each epoch)\n"
           "  --target-accuracy X   stop at the first evaluation with validation accuracy >= X\n"
           "                        (a fraction, 0.9, or a percentage, 90%%)\n"
           "  --checkpoint FILE     safetensors checkpoint, every epoch, at the end, on SIGINT\n"
           "  --resume FILE         continue a run exactly where its checkpoint stopped\n"
           "  --log FILE            JSON lines of steps and epochs; --log-every N steps\n"
           "  --report FILE         at the end (or a stop) the HTML page of `stoke report`\n"
           "                        from the log and the monitor's samples (docs/report.md)\n"
           "  --dry-run             print the memory plan and the largest batch that fits\n"
           "  --memory-budget B     memory the models may take, checked before allocating and\n"
           "                        --dry-run's budget (512M, 4G; default what is available)\n"
           "  --no-monitor          no embedded utilization monitor\n"
           "  --prometheus ADDR:PORT  serve the run's progress and the monitor's readings at\n"
           "                        http://ADDR:PORT/metrics (:PORT is loopback, port 0 a\n"
           "                        free one; data parallel: rank 0; docs/prometheus.md);\n"
           "                        --prometheus-public allows other addresses\n"
           "  --config FILE         YAML file of settings (key: value, keys as above with _)\n\n"
           "Precedence: defaults < --config file < environment < flags; `stoke config show`\n"
           "prints each setting's value and source. Exit status: 0 done,\n"
           "1 error, 2 usage, 130/143 interrupted by SIGINT/SIGTERM (checkpoint written).\n");
}

typedef struct out_state {
    bool tty;
    bool line_open;          /* a progress line is on screen without its newline */
    stoke_prom_server *prom; /* --prometheus; NULL without */
    stoke_trainer *t;        /* once stoke_trainer_new returned (its monitor) */
    stoke_prom_train pt;     /* what prom was last given */
    stoke_mon_sample sample;
} out_state;

static double ratio(double pct) { return isfinite(pct) ? pct / 100 : NAN; }

/* The event's figures to the Prometheus endpoint, with the monitor's latest sample: a
 * copy each (progress events come at most four times a second). */
static void publish(out_state *o, const stoke_train_event *e)
{
    stoke_prom_train *p = &o->pt;
    if (e->kind == STOKE_EV_PROGRESS || e->kind == STOKE_EV_EPOCH) {
        p->valid = true;
        p->steps = e->step;
        p->epoch = e->epoch + 1;
        p->epochs = e->epochs;
        p->samples_per_s = e->samples_per_s;
        p->data_wait_ratio = ratio(e->data_wait_pct);
        p->loss = e->loss;
        p->lr = e->lr;
        if (e->kind == STOKE_EV_EPOCH) /* the trainer computes MFU per epoch */
            p->mfu_ratio = ratio(e->mfu_pct);
        p->metric_is_acc = e->metric_name && !strcmp(e->metric_name, "acc");
        p->metric = e->metric; /* accuracy is a fraction already */
        const double ph[5] = {e->input_pct, e->forward_pct, e->backward_pct, e->optimizer_pct,
                              e->world > 1 ? e->allreduce_pct : NAN};
        for (int i = 0; i < 5; i++)
            p->phase_ratio[i] = ratio(ph[i]);
        p->elapsed_s = e->run_elapsed_s;
        p->world = e->world;
    }
    if ((e->kind == STOKE_EV_EPOCH || e->kind == STOKE_EV_EVAL || e->kind == STOKE_EV_TARGET) &&
        isfinite(e->val_loss)) {
        p->val_loss = e->val_loss;
        p->val_metric = e->val_metric;
    }
    stoke_prom_publish_train(o->prom, p);
    struct stoke_monitor *m = o->t ? stoke_trainer_monitor(o->t) : NULL;
    if (m && stoke_monitor_latest(m, &o->sample))
        stoke_prom_publish_sample(o->prom, &o->sample);
}

static void on_event(const stoke_train_event *e, void *ctx)
{
    out_state *o = ctx;
    if (o->prom)
        publish(o, e);
    char buf[1200];
    if (o->line_open && e->kind != STOKE_EV_PROGRESS) {
        fputs("\r\033[K", stdout);
        o->line_open = false;
    }
    switch (e->kind) {
    case STOKE_EV_INFO: printf("%s\n", e->text); break;
    case STOKE_EV_PROGRESS:
        stoke_train_format_progress(e, buf, sizeof buf);
        if (o->tty) {
            printf("\r\033[K%s", buf);
            o->line_open = true;
        } else if (e->tick) {
            printf("%s\n", buf);
        }
        break;
    case STOKE_EV_EPOCH:
        stoke_train_format_epoch(e, buf, sizeof buf);
        printf("%s\n", buf);
        break;
    case STOKE_EV_WARNING: printf("warning: %s\n", e->text); break;
    case STOKE_EV_CHECKPOINT:
        printf("checkpoint: %s (step %" PRId64 ")\n", e->text, e->step);
        break;
    case STOKE_EV_EVAL:
        stoke_train_format_eval(e, buf, sizeof buf);
        printf("%s\n", buf);
        break;
    case STOKE_EV_TARGET:
        stoke_train_format_target(e, buf, sizeof buf);
        printf("%s\n", buf);
        break;
    }
    fflush(stdout);
}

static void print_plan(const stoke_mem_plan *p, int64_t max_batch, size_t budget, size_t beside)
{
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
    printf("memory plan for batch %" PRId64 ":\n", p->batch);
    printf("  parameters         %12zu bytes  %s\n", p->params,
           stoke_format_bytes((double)p->params, a, sizeof a));
    printf("  gradients          %12zu bytes  %s\n", p->grads,
           stoke_format_bytes((double)p->grads, b, sizeof b));
    printf("  optimizer state    %12zu bytes  %s\n", p->optim,
           stoke_format_bytes((double)p->optim, c, sizeof c));
    printf("  activations        %12zu bytes  %s (%zu per sample x %" PRId64 ")\n",
           p->activations_per_sample * (size_t)p->batch,
           stoke_format_bytes((double)p->activations_per_sample * (double)p->batch, d, sizeof d),
           p->activations_per_sample, p->batch);
    if (p->recompute_segments > 0)
        printf("                     (recompute: %d segments, activations recomputed in "
               "backward)\n",
               p->recompute_segments);
    printf("  workspace          %12zu bytes  %s", p->workspace,
           stoke_format_bytes((double)p->workspace, e, sizeof e));
    if (p->last_batch > 0)
        printf(" (the larger of batch %" PRId64 " and the epoch's last batch, %" PRId64 ")",
               p->batch, p->last_batch);
    printf("\n");
    printf("  total              %12zu bytes  %s\n", p->total,
           stoke_format_bytes((double)p->total, f, sizeof f));
    char h[32];
    printf("largest batch within %s%s%s%s: %" PRId64 "%s\n",
           stoke_format_bytes((double)budget, g, sizeof g), beside ? " less " : "",
           beside ? stoke_format_bytes((double)beside, h, sizeof h) : "",
           beside ? " for validation and the data held" : "", max_batch,
           max_batch == 0                       ? " (not even one sample fits)"
           : max_batch == p->opts.epoch_samples ? " (the whole epoch)"
                                                : "");
}

/* The options of every command that trains: each setting of the configuration table
 * as --its-name (a true/false one alone sets it true), and these. */
static const cli_opt train_opts[] = {
    {.name = "config", .type = CLI_CONFIG, .arg = "FILE"},
    {.name = "no-monitor", .type = CLI_SETTING, .key = "monitor", .value = "false"},
    /* the flag alone turns it on; a mode may follow it */
    {.name = "recompute", .type = CLI_SETTING, .value = "on", .choices = " on off auto "},
    {.name = "*", .type = CLI_SETTING},
    {0}};

int cli_train_settings(const char *cmd, int argc, char **argv, const cli_opt *own, void *own_dest,
                       stoke_train_config *cfg, const char **config_path, void (*usage)(void))
{
    stoke_train_config_defaults(cfg);
    *config_path = NULL;
    cli_group groups[] = {{own, own_dest}, {train_opts, cfg}};
    cli_spec s = {.cmd = cmd,
                  .usage = usage,
                  .groups = own ? groups : groups + 1,
                  .ngroups = own ? 2 : 1,
                  .equals = true,
                  .given = calloc((size_t)argc + 1, sizeof(cli_given)),
                  .max_given = argc};
    if (!s.given)
        return cli_error(cmd, "out of memory");
    int rc = cli_parse(&s, argc, argv, 1);
    if (rc < 0)
        rc = cli_apply_settings(&s, cfg, config_path);
    free(s.given);
    return rc;
}

/* train's own options, beside the settings */
typedef struct train_args {
    long nproc;
    const char *prometheus;
    bool prometheus_public;
} train_args;

static const cli_opt train_own[] = {{.name = "nproc",
                                     .type = CLI_LONG,
                                     .off = offsetof(train_args, nproc),
                                     .arg = "N",
                                     .min = 1,
                                     .max = 4096,
                                     .want = "is a number of ranks in [1, 4096]"},
                                    {.name = "prometheus",
                                     .type = CLI_TEXT,
                                     .off = offsetof(train_args, prometheus),
                                     .arg = "ADDR:PORT",
                                     .min = 1},
                                    {.name = "prometheus-public",
                                     .type = CLI_SWITCH,
                                     .off = offsetof(train_args, prometheus_public)},
                                    {0}};

static int train_world(stoke_train_config *cfg, stoke_dist **world, char *who, size_t size);
static int report_prepare(stoke_train_config *cfg, const char *who, char *tmp_log, char *tmp_mon);
static int report_finish(const stoke_train_config *cfg, const char *who, int rc,
                         const char *tmp_log, const char *tmp_mon);
static int train_in(stoke_train_config *cfg, const train_args *a, char *who, bool *failed);
static int train_run(stoke_train_config *cfg, out_state *o, char *who, bool *failed);

int cmd_train(int argc, char **argv)
{
    stoke_train_config cfg;
    const char *config_path;
    train_args a = {0};
    int rc =
        cli_train_settings("train", argc, argv, train_own, &a, &cfg, &config_path, cmd_train_usage);
    if (rc >= 0)
        return rc;
    if (a.nproc > 1)
        return cli_launch_nproc(a.nproc, argc, argv);
    stoke_dist *world = NULL;
    char who[64] = "train";
    if ((rc = train_world(&cfg, &world, who, sizeof who)) >= 0)
        return rc;
    bool failed = false; /* an error, not a stop every rank agreed on */
    char tmp_log[sizeof cfg.log] = "", tmp_mon[4200] = "";
    if ((rc = report_prepare(&cfg, who, tmp_log, tmp_mon)) < 0) {
        rc = train_in(&cfg, &a, who, &failed);
        if (!failed && !cfg.dry_run)
            rc = report_finish(&cfg, who, rc, tmp_log, tmp_mon);
        if (tmp_log[0])
            unlink(tmp_log);
        if (tmp_mon[0])
            unlink(tmp_mon);
    }
    if (failed && world && stoke_dist_world_size(world) > 1)
        stoke_dist_abort(world, rc); /* the others may be waiting for this rank */
    stoke_dist_free(world);          /* after the trainer: MPI_Finalize */
    return rc;
}

/* --report (rank 0 only, as the log): the log of the run (a temporary one when no --log
 * is given) and the embedded monitor's samples in a temporary file, both beside the
 * page. -1 when ready (or nothing to do), else the exit code. */
static int report_prepare(stoke_train_config *cfg, const char *who, char *tmp_log, char *tmp_mon)
{
    if (!cfg->report[0] || cfg->dry_run || (cfg->world && stoke_dist_rank(cfg->world) != 0))
        return -1;
    if (stoke_tmpfile_check(cfg->report) != STOKE_OK)
        return cli_error(who, "--report: %s", stoke_last_error());
    int rc;
    if (!cfg->log[0]) {
        if ((rc = cli_report_temp(who, cfg->report, "log", tmp_log, sizeof cfg->log)) >= 0)
            return rc;
        snprintf(cfg->log, sizeof cfg->log, "%s", tmp_log);
    }
    if ((rc = cli_report_temp(who, cfg->report, "monitor", tmp_mon, 4200)) >= 0)
        return rc;
    cfg->monitor_jsonl = tmp_mon;
    return -1;
}

/* The page, after the run (or its stop): an error writing it makes a successful run's
 * exit status 1, and leaves a stopped run's as it was. */
static int report_finish(const stoke_train_config *cfg, const char *who, int rc,
                         const char *tmp_log, const char *tmp_mon)
{
    if (!cfg->report[0] || (cfg->world && stoke_dist_rank(cfg->world) != 0))
        return rc;
    const char *in[2] = {tmp_log[0] ? tmp_log : cfg->log, tmp_mon};
    struct stat st; /* no sample (a run shorter than the interval, --no-monitor): no file */
    bool samples = tmp_mon[0] && stat(tmp_mon, &st) == 0 && st.st_size > 0;
    const char *names[2] = {tmp_log[0] ? "this run's log (no --log given)" : NULL,
                            "this run's embedded monitor"};
    int wrc = cli_report_write(who, in, names, samples ? 2 : 1, cfg->report);
    return rc ? rc : wrc;
}

/* Launched by mpirun: MPI's world, in cfg (its errors then name the rank). -1 when
 * all is well. */
static int train_world(stoke_train_config *cfg, stoke_dist **world, char *who, size_t size)
{
    int n;
    if (!stoke_dist_launched(&n) || n == 1)
        return -1;
    if (stoke_dist_init(world) != STOKE_OK)
        return cli_last_error("train");
    cfg->world = *world;
    snprintf(who, size, "train (rank %d of %d)", stoke_dist_rank(*world),
             stoke_dist_world_size(*world));
    /* rank 0 speaks for the world; the others print only their errors */
    if (stoke_dist_rank(*world) != 0 && !freopen("/dev/null", "w", stdout))
        return cli_error(who, "cannot quiet this rank's output: %s", strerror(errno));
    return -1;
}

static int train_in(stoke_train_config *cfg_in, const train_args *a, char *who, bool *failed)
{
    *failed = true;
    stoke_train_config cfg = *cfg_in;
    int rc;
    out_state *o = calloc(1, sizeof *o);
    if (!o)
        return cli_error(who, "out of memory");
    o->tty = isatty(STDOUT_FILENO);
    o->pt.val_loss = o->pt.val_metric = o->pt.mfu_ratio = NAN;
    /* Data parallel: rank 0 serves; its figures are the world's (the same batch). Before
     * the trainer, so a taken port stops the run before its setup. */
    if (a->prometheus && !cfg.dry_run && (!cfg.world || stoke_dist_rank(cfg.world) == 0)) {
        if (stoke_prom_start(a->prometheus, a->prometheus_public, "train", &o->prom) != STOKE_OK) {
            free(o);
            return cli_last_error(who);
        }
        printf("prometheus: %s\n", stoke_prom_url(o->prom));
        fflush(stdout);
    }
    rc = train_run(&cfg, o, who, failed);
    stoke_prom_stop(o->prom); /* the trainer is gone: nothing publishes any more */
    free(o);
    return rc;
}

static int train_run(stoke_train_config *cfg_in, out_state *op, char *who, bool *failed)
{
    stoke_train_config cfg = *cfg_in;
    int rc;
    stoke_trainer *t;
    if (stoke_trainer_new(&cfg, on_event, op, &t) != STOKE_OK)
        return cli_last_error(who);
    op->t = t;
    if (cfg.dry_run) {
        stoke_mem_plan plan;
        int64_t maxb;
        size_t budget, beside;
        stoke_status s = stoke_trainer_plan(t, 0, &plan, &maxb, &budget, &beside);
        if (s == STOKE_OK)
            print_plan(&plan, maxb, budget, beside);
        stoke_trainer_free(t);
        *failed = s != STOKE_OK;
        return s == STOKE_OK ? 0 : cli_last_error(who);
    }
    cli_stop_catch();
    stoke_status s = stoke_trainer_run(t, &cli_stop_flag);
    cli_stop_release();
    if (op->line_open)
        fputs("\r\033[K", stdout);
    if (s != STOKE_OK) {
        rc = cli_last_error(who);
        stoke_trainer_free(t);
        return rc;
    }
    stoke_train_result r;
    stoke_trainer_result(t, &r);
    /* the run's settings: with --resume, those not given came from the checkpoint */
    const stoke_train_config *run = stoke_trainer_config(t);
    char ckpt[sizeof run->checkpoint + sizeof run->resume + 200] = "";
    if (run->checkpoint[0] && stoke_train_config_source(run, "checkpoint") == STOKE_CFG_CHECKPOINT)
        snprintf(ckpt, sizeof ckpt,
                 "; checkpoint written to %s (the path in %s's config: a resumed run goes on "
                 "writing where it did; --checkpoint writes elsewhere)",
                 run->checkpoint, run->resume);
    else if (run->checkpoint[0])
        snprintf(ckpt, sizeof ckpt, "; checkpoint written to %s", run->checkpoint);
    char val[96] = "";
    if (isfinite(r.val_metric) && !strcmp(r.metric_name, "acc"))
        snprintf(val, sizeof val, ", val loss %.4f, val acc %.2f%%", r.val_loss,
                 100 * r.val_metric);
    else if (isfinite(r.val_loss))
        snprintf(val, sizeof val, ", val loss %.4f", r.val_loss);
    /* With --target-accuracy the last line says whether it was reached. */
    char target[160] = "";
    if (run->target_accuracy > 0 && !r.target_reached)
        snprintf(target, sizeof target, "; target val acc %.2f%% not reached (best %.2f%%)",
                 100 * run->target_accuracy, 100 * r.best_val_metric);
    if (r.interrupted)
        printf("stopped after step %" PRId64 " (%s)%s%s\n", r.steps,
               cli_stop_signal() ? cli_stop_signal_name() : "max steps",
               ckpt[0] ? ckpt : "; no --checkpoint given", target);
    else if (r.target_reached)
        printf("done: target val acc %.2f%% reached at step %" PRId64 " (epoch %" PRId64
               ") in %.1fs%s%s\n",
               100 * run->target_accuracy, r.target_step, r.target_epoch + 1, r.target_elapsed_s,
               val, ckpt);
    else
        printf("done: %" PRId64 " epoch%s, %" PRId64 " steps in %.1fs%s%s\n", r.epochs_done,
               r.epochs_done == 1 ? "" : "s", r.steps, r.seconds, val, target);
    stoke_trainer_free(t);
    *failed = false;
    if (r.interrupted && cli_stop_signal())
        return 128 + cli_stop_signal();
    return 0;
}
