/* rules_gpu.c - the rules of the GPU side: its memory unused or nearly full (system RAM
 * too, the same risk), its clocks held down by power or heat, and a GPU left idle. */
#include "monitor/rules_impl.h"

#include <math.h>

#include "core/text.h"

#define GB 1e9

/* GPU busy but most of its memory unused. */
bool rule_check_batch_grow(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *u = &s->gpu[g].s[STOKE_G_UTIL];
        const stoke_stats *m = &s->gpu[g].s[STOKE_G_MEM_USED];
        double total = (double)s->gpu[g].mem_total_bytes;
        if (!rule_gpu_considered(s, g) || u->n == 0 || m->n == 0 || total <= 0 || m->max <= 0)
            continue;
        if (u->median < r->gpu_util_atleast || m->max / total >= r->mem_frac_below)
            continue;
        double target = r->mem_target_frac * total;
        double factor = target / m->max;
        f->gpu = g;
        double util = rule_fig(f, "gpu_util_median", u->median, "%");
        double peak = rule_fig(f, "gpu_mem_peak", m->max / GB, "GB");
        double all = rule_fig(f, "gpu_mem_total", total / GB, "GB");
        double pct = rule_fig(f, "gpu_mem_peak_pct", 100.0 * m->max / total, "%");
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d utilization median %.0f%% with memory peak %.1f of %.1f GB (%.1f%%)", g,
                  util, peak, all, pct);
        double headroom = rule_fig(f, "headroom", (target - m->max) / GB, "GB");
        double most = rule_fig(f, "batch_scale_max", floor(factor), "x");
        char knob[96];
        stoke_say(
            f->advice, sizeof f->advice,
            "the batch can grow: %.1f GB of headroom up to %.0f%% of memory; memory grows at "
            "most in proportion to the batch, so up to about %.0fx the batch fits - grow it in "
            "steps (2x first: %s) watching memory, and scale the learning rate with it",
            headroom, 100.0 * r->mem_target_frac, most,
            rule_batch_knob(s, f, 2, knob, sizeof knob));
        return true;
    }
    return false;
}

/* GPU or system memory nearly full. */
bool rule_check_memory_full(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *m = &s->gpu[g].s[STOKE_G_MEM_USED];
        double total = (double)s->gpu[g].mem_total_bytes;
        if (!rule_gpu_considered(s, g) || m->n == 0 || total <= 0 ||
            m->max / total < r->mem_frac_atleast)
            continue;
        f->gpu = g;
        double peak = rule_fig(f, "gpu_mem_peak", m->max / GB, "GB");
        double all = rule_fig(f, "gpu_mem_total", total / GB, "GB");
        double pct = rule_fig(f, "gpu_mem_peak_pct", 100.0 * m->max / total, "%");
        double median = rule_fig(f, "gpu_mem_median", m->median / GB, "GB");
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d memory peak %.1f of %.1f GB (%.0f%%), median %.1f GB", g, peak, all, pct,
                  median);
        double keep = rule_fig(f, "batch_scale", r->mem_target_frac * total / m->max, "x");
        char knob[96];
        rule_batch_knob(s, f, keep, knob, sizeof knob);
        int steps = (int)rule_change(f, "grad_accum_steps", "steps", NAN,
                                     keep > 0 ? (int)ceil(1.0 / keep) : 2, +1);
        rule_change_to(f, "precision", "bf16");
        stoke_say(f->advice, sizeof f->advice,
                  "one larger batch or allocation away from out-of-memory: scale the batch by "
                  "about %.2f (%s) to stay near %.0f%% of memory and use gradient accumulation (%d "
                  "steps keep the effective batch), or use bf16/fp16 activations%s",
                  keep, knob, 100.0 * r->mem_target_frac, steps,
                  rule_is_stoke(s)
                      ? ""
                      : "; PyTorch's caching allocator may hold freed memory, so check "
                        "torch.cuda.max_memory_allocated too");
        return true;
    }
    const stoke_stats *m = &s->sys[STOKE_M_MEM_USED];
    double total = (double)s->mem_total_bytes;
    if (m->n && total > 0 && m->max / total >= r->mem_frac_atleast) {
        f->gpu = -1;
        double peak = rule_fig(f, "ram_peak", m->max / GB, "GB");
        double all = rule_fig(f, "ram_total", total / GB, "GB");
        double pct = rule_fig(f, "ram_peak_pct", 100.0 * m->max / total, "%");
        char rss[64] = "";
        if (s->sys[STOKE_M_PROC_RSS].n)
            stoke_say(rss, sizeof rss, "; the job's RSS peaked at %.1f GB",
                      rule_fig(f, "job_rss_peak", s->sys[STOKE_M_PROC_RSS].max / GB, "GB"));
        stoke_say(f->evidence, sizeof f->evidence, "RAM peak %.1f of %.1f GB (%.0f%%)%s", peak, all,
                  pct, rss);
        double excess = rule_fig(f, "to_free",
                                 m->max - r->mem_target_frac * total > 0
                                     ? (m->max - r->mem_target_frac * total) / GB
                                     : 0.0,
                                 "GB");
        /* Fewer and shallower, without a number: what each worker holds is not measured. */
        rule_change(f, "workers", "workers", rule_current_workers(s), NAN, -1);
        rule_change(f, "prefetch", "batches", rule_current_prefetch(s), NAN, -1);
        stoke_say(
            f->advice, sizeof f->advice,
            "system memory is nearly full (the kernel's OOM killer or swapping is next): free "
            "about %.1f GB - fewer loader workers or a shallower prefetch (%s; each worker "
            "holds its own batches), memory-map the dataset instead of loading it",
            excess,
            rule_is_stoke(s) ? "--workers, --prefetch" : "DataLoader num_workers, prefetch_factor");
        return true;
    }
    return false;
}

/* Power or thermal throttling in a large part of the samples. */
bool rule_check_throttle(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    for (int g = 0; g < s->gpu_count; g++) {
        size_t n = s->gpu[g].throttle_samples;
        if (!rule_gpu_considered(s, g) || n == 0)
            continue;
        double pw = (double)s->gpu[g].power_throttled / (double)n;
        double th = (double)s->gpu[g].thermal_throttled / (double)n;
        if (pw < r->samples_frac_atleast && th < r->samples_frac_atleast)
            continue;
        f->gpu = g;
        rule_fig(f, "power_throttled_pct", 100.0 * pw, "%");
        rule_fig(f, "thermal_throttled_pct", 100.0 * th, "%");
        const stoke_stats *p = &s->gpu[g].s[STOKE_G_POWER];
        const stoke_stats *t = &s->gpu[g].s[STOKE_G_TEMP];
        const stoke_stats *c = &s->gpu[g].s[STOKE_G_SM_CLOCK];
        char pwr[80] = "", temp[64] = "", clk[80] = "";
        double limit = s->gpu[g].power_limit_w;
        if (limit > 0)
            rule_fig(f, "power_limit", limit, "W");
        if (p->n && limit > 0)
            stoke_say(pwr, sizeof pwr, "; power median %.0f W of a %.0f W limit",
                      rule_fig(f, "power_median", p->median, "W"), limit);
        if (t->n)
            stoke_say(temp, sizeof temp, "; temperature p95 %.0f C",
                      rule_fig(f, "temperature_p95", t->p95, "C"));
        if (c->n) {
            double clock = rule_fig(f, "sm_clock_median", c->median, "MHz");
            stoke_say(clk, sizeof clk, "; SM clock median %.0f MHz (max seen %.0f)", clock,
                      rule_fig(f, "sm_clock_max", c->max, "MHz"));
        }
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d throttled in %.0f%% of samples by power and %.0f%% by temperature%s%s%s",
                  g, 100.0 * pw, 100.0 * th, pwr, temp, clk);
        if (th >= r->samples_frac_atleast) {
            double cap = rule_change(f, "power_limit", "W", limit > 0 ? limit : NAN,
                                     limit > 0 ? 0.9 * limit : NAN, -1);
            stoke_say(
                f->advice, sizeof f->advice,
                "the GPU slows down to cool off: improve airflow or the fan curve, or cap "
                "power a little (nvidia-smi -pl %.0f, 10%% under the limit) to keep the clock "
                "steady below the thermal limit",
                limit > 0 ? cap : 0.0);
        } else {
            /* Raised only if under the card's default, which NVML's reading here lacks. */
            rule_change(f, "power_limit", "W", limit > 0 ? limit : NAN, NAN, +1);
            rule_change_to(f, "precision", "bf16");
            stoke_say(f->advice, sizeof f->advice,
                      "the GPU is held at its power limit: normal at full load, but if the limit "
                      "(%.0f W) is under the card's default raise it (nvidia-smi -pl); bf16/fp16 "
                      "math does more work per watt",
                      limit);
        }
        return true;
    }
    return false;
}

/* Seed 003's automatic warning. */
bool rule_check_low_util(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f)
{
    for (int g = 0; g < s->gpu_count; g++) {
        const stoke_stats *u = &s->gpu[g].s[STOKE_G_UTIL];
        if (!rule_gpu_considered(s, g) || u->n == 0 || u->median >= r->gpu_util_below)
            continue;
        f->gpu = g;
        double util = rule_fig(f, "gpu_util_median", u->median, "%");
        double p95 = rule_fig(f, "gpu_util_p95", u->p95, "%");
        double max = rule_fig(f, "gpu_util_max", u->max, "%");
        stoke_say(f->evidence, sizeof f->evidence,
                  "GPU %d utilization median %.0f%% (p95 %.0f%%, max %.0f%%) is under %.0f%%", g,
                  util, p95, max, r->gpu_util_below);
        const stoke_stats *m = &s->gpu[g].s[STOKE_G_MEM_USED];
        char mem[96] = "";
        if (m->n && s->gpu[g].mem_total_bytes) {
            double peak = rule_fig(f, "gpu_mem_peak", m->max / GB, "GB");
            stoke_say(mem, sizeof mem, " (memory peak %.1f of %.1f GB)", peak,
                      rule_fig(f, "gpu_mem_total", (double)s->gpu[g].mem_total_bytes / GB, "GB"));
        }
        int usable = (int)rule_fig(f, "usable_cpus", s->usable_cpus, "cores");
        int n = rule_more_workers(f, s, rule_suggested_workers(s));
        char knob[96];
        stoke_say(f->advice, sizeof f->advice,
                  "possible causes: a batch too small for the GPU%s, too few loader workers "
                  "(%d cores: try %d) - %s, too little prefetch; the other findings say which",
                  mem, usable, n, rule_workers_knob(s, n, knob, sizeof knob));
        return true;
    }
    return false;
}
