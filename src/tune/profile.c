/* profile.c - which hardware profile (docs/profiles.md) a device starts from, and its
 * start values scaled to this machine. The table is data read by the train module (it
 * owns the YAML reader); this module only matches, so probe and decide agree. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoke/tune.h"
#include "tune/tune_impl.h"

const char *stoke_profile_how_name(stoke_profile_how how)
{
    static const char *n[] = {"none", "name", "class", "cpu"};
    return (unsigned)how < sizeof n / sizeof n[0] ? n[how] : "?";
}

static void say(stoke_profile_match *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(stoke_profile_match *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->why, sizeof o->why, fmt, ap);
    va_end(ap);
}

/* `part` as whole words of `name`, any case: a letter or digit on either side would make
 * "H200" match "GH200" (a Grace Hopper) and "L4" match "L40S" (another class). */
static bool has_word(const char *name, const char *part)
{
    size_t n = strlen(part);
    if (!n)
        return false;
    for (const char *s = name; *s; s++) {
        if (strncasecmp(s, part, n))
            continue;
        bool left = s == name || !isalnum((unsigned char)s[-1]);
        bool right = !isalnum((unsigned char)s[n]);
        if (left && right)
            return true;
    }
    return false;
}

/* The profile's workers on this machine: scaled by the usable CPUs when the seed gave a
 * count for a core count, capped by the profile, then by the CPUs left over (a GPU run
 * keeps one for the training loop and one per GPU, as the loader_workers rule; a CPU run
 * keeps one for the math), at least 1 so loading overlaps compute. */
static int scaled_workers(const stoke_profile *p, const stoke_machine *m, bool gpu)
{
    int usable = stoke_cpu_available(&m->cpu); /* affinity and cgroup quota */
    if (usable <= 1 || p->workers == 0)
        return 0;
    long n = p->workers;
    if (p->workers_for_cores > 0)
        n = (long)p->workers * usable / p->workers_for_cores;
    if (p->workers_max > 0 && n > p->workers_max)
        n = p->workers_max;
    int room = gpu ? usable - 1 - m->gpu_count : usable - 1;
    if (n > room)
        n = room;
    return n < 1 ? 1 : (int)n;
}

static void fill(const stoke_profile *p, const stoke_machine *m, bool gpu, stoke_profile_match *o)
{
    o->profile = *p;
    o->workers = scaled_workers(p, m, gpu);
    o->prefetch = tune_prefetch_clamp((long)o->workers * p->prefetch_factor);
}

/* Distance of a profile's class from a GPU: minor versions first, then how many times
 * larger one memory is than the other (unknown memory is no distance). */
static double class_distance(const stoke_profile *p, const stoke_gpu_info *g)
{
    double d = 1000.0 * abs(p->cc_minor - g->cc_minor);
    if (p->memory_gb > 0 && (g->valid & STOKE_GPU_HAS_MEMORY) && g->memory_total_bytes)
        d += fabs(log(p->memory_gb * 1e9 / (double)g->memory_total_bytes));
    return d;
}

static stoke_profile_how by_class(const stoke_profiles *p, const stoke_machine *m,
                                  const stoke_gpu_info *g, stoke_profile_match *o)
{
    if (!(g->valid & STOKE_GPU_HAS_CC)) {
        say(o,
            "no profile names '%s' and the driver did not report its compute capability: "
            "the rules decide",
            g->name);
        return o->how = STOKE_PROFILE_NONE;
    }
    const stoke_profile *best = NULL;
    double best_d = 0;
    for (int i = 0; i < p->count; i++) {
        const stoke_profile *c = &p->items[i];
        if (c->cpu_only || c->cc_major != g->cc_major)
            continue;
        double d = class_distance(c, g);
        if (!best || d < best_d) {
            best = c;
            best_d = d;
        }
    }
    if (!best) {
        say(o, "no profile names '%s' or has compute capability %d.x: the rules decide", g->name,
            g->cc_major);
        return o->how = STOKE_PROFILE_NONE;
    }
    fill(best, m, true, o);
    char mem[48] = "";
    if (best->memory_gb > 0 && (g->valid & STOKE_GPU_HAS_MEMORY))
        snprintf(mem, sizeof mem, ", %.0f GB against its %.0f GB",
                 (double)g->memory_total_bytes / 1e9, best->memory_gb);
    say(o, "no profile names '%s'; the nearest class: compute capability %d.%d like %s's %d.%d%s",
        g->name, g->cc_major, g->cc_minor, best->name, best->cc_major, best->cc_minor, mem);
    return o->how = STOKE_PROFILE_BY_CLASS;
}

stoke_profile_how stoke_profile_match_device(const stoke_profiles *p, const stoke_machine *m,
                                             int gpu, stoke_profile_match *out)
{
    memset(out, 0, sizeof *out);
    if (!p || p->count == 0) {
        say(out, "no profiles loaded: the rules decide");
        return out->how = STOKE_PROFILE_NONE;
    }
    if (gpu == STOKE_TUNE_CPU) {
        for (int i = 0; i < p->count; i++)
            if (p->items[i].cpu_only) {
                fill(&p->items[i], m, false, out);
                say(out, "the CPU-only class: training on the CPU");
                return out->how = STOKE_PROFILE_CPU;
            }
        say(out, "no CPU-only profile in %s: the rules decide", p->origin);
        return out->how = STOKE_PROFILE_NONE;
    }
    if (gpu < 0 || gpu >= m->gpu_count) {
        say(out, "the device is not among the GPUs found: the rules decide");
        return out->how = STOKE_PROFILE_NONE;
    }
    const stoke_gpu_info *g = &m->gpus[gpu];
    const stoke_profile *best = NULL;
    size_t best_len = 0;
    const char *word = NULL;
    for (int i = 0; i < p->count; i++)
        for (int j = 0; j < p->items[i].gpu_name_count; j++) {
            const char *w = p->items[i].gpu_names[j];
            if (strlen(w) > best_len && has_word(g->name, w)) {
                best = &p->items[i];
                best_len = strlen(w);
                word = w;
            }
        }
    if (!best)
        return by_class(p, m, g, out);
    fill(best, m, true, out);
    say(out, "'%s' names '%s'", g->name, word);
    return out->how = STOKE_PROFILE_BY_NAME;
}
