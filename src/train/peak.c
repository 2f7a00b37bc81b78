/* peak.c - the peak MFU is measured against, and its cache.
 *
 * On a CPU the peak is measured: oneDNN's matmul, the kernel training runs on, at the
 * run's precision and compute threads (stoke_nn_cpu_matmul_rate). A peak computed
 * from the clock the kernel reports and a FLOPs-per-cycle table read 1.6x high on a
 * Zen 5 guest (2,596 MHz reported, 4.3 GHz run; MFU printed up to 144%). The
 * measurement takes a few hundred ms, so it is kept per machine, threads and
 * precision beside the tuning cache (<cache>/peak/<hash>.txt): a later run reads it.
 * The clock's figure is the fallback when nothing can be measured; a GPU keeps its
 * specification's peak (stoke_gpu_peak_flops). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/regular.h"
#include "core/text.h"
#include "core/tmpfile.h"
#include "train/trainer.h"

#define PEAK_FORMAT "stoke-peak-1"

void train_peak_key(const stoke_cpu_info *cpu, stoke_precision p, int threads, char *key,
                    size_t size)
{
    /* the model name alone does not tell a capped CPU (STOKE_MAX_CPU_ISA) from the
     * whole one, whose kernels differ: the features in use are part of the key */
    stoke_say(key, size,
              PEAK_FORMAT "|cpu=%s|vendor=%s|family=%d|model=%d|stepping=%d|simd=%x|"
                          "threads=%d|precision=%s",
              cpu->model, cpu->vendor, cpu->family, cpu->model_number, cpu->stepping,
              (unsigned)cpu->simd, threads, stoke_precision_name(p));
    for (char *c = key; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
}

/* The value after "\n<name>: " (or at the start), up to the line's end, or NULL. */
static const char *field(const char *text, const char *name, size_t *len)
{
    size_t n = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (!strncmp(l, name, n) && l[n] == ':' && l[n + 1] == ' ') {
            *len = strcspn(l + n + 2, "\n");
            return l + n + 2;
        }
    return NULL;
}

bool train_peak_cache_read(const char *path, const char *key, double *flops, char *when,
                           size_t when_size, char *why, size_t why_size)
{
    *flops = 0;
    FILE *f = NULL;
    /* never opened if it is not a regular file: a FIFO would hang the run */
    stoke_status os = stoke_fopen_regular(path, "peak cache", &f);
    if (os != STOKE_OK) {
        if (os == STOKE_ERR_NOTFOUND)
            stoke_say(why, why_size, "not measured before");
        else
            stoke_say(why, why_size, "%s", stoke_last_error());
        return false;
    }
    char text[4096];
    size_t len = fread(text, 1, sizeof text - 1, f);
    bool more = len == sizeof text - 1 && fgetc(f) != EOF;
    fclose(f);
    text[len] = '\0';
    size_t kl = 0, fl = 0, wl = 0;
    const char *k = field(text, "key", &kl), *fv = field(text, "flops", &fl),
               *w = field(text, "measured", &wl);
    if (more || strlen(text) != len || !k || !fv || !w || wl == 0 || wl >= when_size) {
        stoke_say(why, why_size, "%s: not a peak cache file (%s)", path,
                  more                  ? "longer than one"
                  : strlen(text) != len ? "a NUL byte in it"
                  : !k                  ? "no key line"
                  : !fv                 ? "no flops line"
                                        : "no measured date");
        return false;
    }
    if (kl != strlen(key) || strncmp(k, key, kl)) {
        stoke_say(why, why_size, "%s is for another CPU, thread count or precision", path);
        return false;
    }
    char *end;
    double v = strtod(fv, &end);
    if (end == fv || (size_t)(end - fv) != fl || !isfinite(v) || v <= 0) {
        stoke_say(why, why_size,
                  "%s: not a peak cache file (flops: '%.*s' is not a positive "
                  "number)",
                  path, (int)(fl < 40 ? fl : 40), fv);
        return false;
    }
    *flops = v;
    stoke_say(when, when_size, "%.*s", (int)wl, w);
    return true;
}

stoke_status train_peak_cache_write(const char *path, const char *key, double flops,
                                    const char *what)
{
    char when[40] = "", text[2048];
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    stoke_say(text, sizeof text,
              "# stoke: the peak MFU is measured against (%s)\nkey: %s\n"
              "flops: %.6e\nmeasured: %s\n",
              what, key, flops, when);
    if (!train_make_dirs(path))
        return stoke_fail(STOKE_ERR_IO, "%s: cannot create its directory: %m", path);
    stoke_tmpfile f;
    stoke_status s = stoke_tmpfile_open(&f, path);
    if (s == STOKE_OK && (s = stoke_tmpfile_write(&f, text, strlen(text))) == STOKE_OK)
        s = stoke_tmpfile_commit(&f);
    return s;
}

void train_cpu_peak(const stoke_cpu_info *cpu, stoke_precision p, int threads, bool measure,
                    train_peak *out)
{
    memset(out, 0, sizeof *out);
    char key[1024], why[600] = "", when[40];
    train_peak_key(cpu, p, threads, key, sizeof key);
    train_cache_file("peak", key, "txt", out->cache_path, sizeof out->cache_path);
    if (!out->cache_path[0])
        stoke_say(why, sizeof why,
                  "no cache directory (STOKE_CACHE_DIR, XDG_CACHE_HOME, HOME "
                  "unset)");
    else if (train_peak_cache_read(out->cache_path, key, &out->flops, when, sizeof when, why,
                                   sizeof why)) {
        out->source = TRAIN_PEAK_CACHED;
        out->in_cache = true;
        stoke_say(out->label, sizeof out->label, "cached from %s", when);
        stoke_say(out->how, sizeof out->how, "oneDNN's %s matmul on %d thread%s, measured %s (%s)",
                  stoke_precision_name(p), threads, threads == 1 ? "" : "s", when, out->cache_path);
        return;
    }
    stoke_nn_matmul_rate r;
    stoke_status s = STOKE_ERR_UNAVAILABLE;
    if (measure)
        s = stoke_nn_cpu_matmul_rate(p, threads, &r);
    if (s == STOKE_OK) {
        out->source = TRAIN_PEAK_MEASURED;
        out->flops = r.flops;
        stoke_say(out->label, sizeof out->label, "measured now%s",
                  r.cpu_share < 0.9 ? ", cores busy" : "");
        char what[200], err[700] = "";
        stoke_say(what, sizeof what,
                  "oneDNN's %s matmul %dx%dx%d on %d thread%s, best of %d "
                  "reps, %.2f s",
                  stoke_precision_name(p), r.n, r.n, r.n, r.threads, r.threads == 1 ? "" : "s",
                  r.reps, r.seconds);
        /* A rate measured while other processes took the cores is theirs to share, not
         * the machine's peak: good for this run (the run shares them too), but not kept
         * for the next one. 0.9: libgomp's threads spin at barriers, so threads that
         * had their cores account for nearly all of the wall time. */
        if (r.cpu_share < 0.9) {
            out->busy = true;
            stoke_say(err, sizeof err,
                      "; kept out of the cache: the cores were busy (its threads ran "
                      "%.0f%% of the time)",
                      100.0 * r.cpu_share);
        } else if (out->cache_path[0]) {
            out->in_cache = train_peak_cache_write(out->cache_path, key, r.flops, what) == STOKE_OK;
            /* a cache that cannot be written costs the next run a measurement, no more */
            if (!out->in_cache)
                stoke_say(err, sizeof err, "; the cache not written: %s", stoke_last_error());
        }
        stoke_say(out->how, sizeof out->how, "%s (no cached peak: %s)%s", what, why, err);
        return;
    }
    char clock_why[300];
    const char *not = measure ? stoke_last_error() : "a dry run measures nothing";
    char nm[300];
    stoke_say(nm, sizeof nm, "%s", not );
    if (stoke_cpu_peak_flops(cpu, p == STOKE_PREC_BF16, &out->flops, clock_why, sizeof clock_why)) {
        out->source = TRAIN_PEAK_CLOCK;
        stoke_say(out->label, sizeof out->label, "computed from the clock");
        stoke_say(out->how, sizeof out->how, "computed from the clock: %s; not measured: %s",
                  clock_why, nm);
    } else {
        out->flops = 0;
        stoke_say(out->how, sizeof out->how, "not measured: %s; %s", nm, clock_why);
    }
}

double train_peak_mfu(stoke_trainer *t, double samples_per_s, int64_t epoch)
{
    train_peak *p = &t->peak;
    if (!(p->flops > 0) || !(t->step_flops > 0) || !(samples_per_s > 0))
        return p->flops > 0 && t->step_flops > 0 ? 0 : NAN;
    double rate = samples_per_s * t->step_flops;
    if (rate <= p->flops)
        return stoke_train_mfu_pct(samples_per_s, t->step_flops, p->flops);
    /* The step's own kernels ran faster than the peak: the peak is wrong (measured
     * while other processes took the cores, a clock the hypervisor under-reports, a GPU
     * whose TF32 beats its FMA rate). Raised to this epoch's rate, a lower bound of the
     * true one, rather than measured again: a new measurement costs the run its time
     * and would meet the same load, while the epoch just measured the same kernels at
     * the run's own sizes. A cached peak is removed so the next run measures it anew. */
    bool cached = p->in_cache && p->source != TRAIN_PEAK_RAISED;
    if (cached)
        unlink(p->cache_path);
    char was[32], now[32];
    stoke_format_flops(p->flops, was, sizeof was);
    stoke_format_flops(rate, now, sizeof now);
    train_info(t,
               "MFU: epoch %" PRId64 " ran at %s, above the peak taken (%s, %s): the peak is "
               "raised to it, so MFU reads 100%%%s",
               epoch + 1, now, was, p->label, cached ? " and the next run measures it again" : "");
    p->flops = rate;
    p->source = TRAIN_PEAK_RAISED;
    stoke_say(p->label, sizeof p->label, "raised to epoch %" PRId64 "'s rate", epoch + 1);
    return 100.0;
}

double stoke_train_mfu_pct(double samples_per_s, double step_flops, double peak_flops)
{
    if (!(peak_flops > 0) || !(step_flops > 0) || !isfinite(samples_per_s))
        return NAN;
    double pct = 100.0 * samples_per_s * step_flops / peak_flops;
    return pct > 100.0 ? 100.0 : pct;
}

/* What MFU is measured against: a training step's FLOPs per sample, as backward
 * computes them, and the device's peak at the run's precision: on a CPU the matmul
 * rate measured (or cached from an earlier run), on a GPU its specification (tensor
 * cores for bf16/fp16; TF32 is not counted as tensor work, so fp32 MFU on a GPU uses
 * the FMA peak, raised by the first epoch that beats it). A tuning trial reports no
 * MFU and measures nothing; a dry run reads the cache but measures nothing. */
void train_setup_mfu(stoke_trainer *t)
{
    memset(&t->peak, 0, sizeof t->peak);
    t->step_flops = stoke_graph_step_flops(t->graph);
    if (t->trial.on)
        return;
    int gi = t->device != STOKE_TUNE_CPU ? stoke_machine_cuda_gpu(&t->machine, t->device) : -1;
    if (gi >= 0) {
        bool lowp = t->precision != STOKE_PREC_FP32;
        if (stoke_gpu_peak_flops(&t->machine.gpus[gi], lowp, &t->peak.flops, t->peak.how,
                                 sizeof t->peak.how)) {
            t->peak.source = TRAIN_PEAK_SPEC;
            stoke_say(t->peak.label, sizeof t->peak.label, "GPU spec");
        }
    } else if (t->device == STOKE_TUNE_CPU) {
        /* emulated bf16 and fp16 run on the fp32 kernels: their rate is fp32's */
        stoke_precision p =
            t->precision == STOKE_PREC_BF16 && stoke_nn_precision_native(STOKE_PREC_BF16)
                ? STOKE_PREC_BF16
                : STOKE_PREC_FP32;
        /* adapting, the count can rise to adapt.max: MFU is against that many threads'
         * peak, so a switch up cannot read above 100% */
        train_cpu_peak(&t->machine.cpu, p, t->adapt.on ? t->adapt.max : t->threads, !t->cfg.dry_run,
                       &t->peak);
    } else {
        stoke_say(t->peak.how, sizeof t->peak.how, "unknown: cuda:%d is not among the GPUs probed",
                  t->device);
    }
    if (!(t->peak.flops > 0)) {
        t->peak.flops = 0;
        t->peak.source = TRAIN_PEAK_NONE;
        train_info(t, "MFU: %.3g MFLOP a sample a step; the peak is unknown (%s)",
                   t->step_flops / 1e6, t->peak.how);
        return;
    }
    char f[32];
    train_info(t,
               "MFU: %.3g MFLOP a sample a step (forward and what backward computes: weight "
               "gradients, and input gradients but the first layer's) against a peak of %s, "
               "%s: %s",
               t->step_flops / 1e6, stoke_format_flops(t->peak.flops, f, sizeof f), t->peak.label,
               t->peak.how);
}
