/* test_profiles.c - the hardware profile file (docs/profiles.md): the built-in table
 * (every seed GPU and stoke's own classes, with their numbers), STOKE_PROFILES, and
 * every refusal naming file:line:col and the field. Matching is in test_tune.c. */
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "stoke/train.h"

static stoke_profiles table;

static const stoke_profile *find(const stoke_profiles *p, const char *name)
{
    for (int i = 0; i < p->count; i++)
        if (!strcmp(p->items[i].name, name))
            return &p->items[i];
    CHECK_MSG(0, "no profile '%s' in %s", name, p->origin);
    static stoke_profile none;
    return &none;
}

/* The seeds' numbers, as data/profiles.yaml records them (../shared/seeds/). */
static void test_builtin(void)
{
    unsetenv("STOKE_PROFILES");
    CHECK_INT_EQ(stoke_profiles_load(&table), STOKE_OK);
    CHECK_STR_EQ(table.origin, "built-in data/profiles.yaml");
    CHECK_INT_EQ(table.count, 9);
    const stoke_profile *p = find(&table, "h100"); /* seed 000 */
    CHECK_INT_EQ(p->batch, 32);
    CHECK_INT_EQ(p->workers, 16);
    CHECK_INT_EQ(p->workers_for_cores, 18);
    CHECK_STR_EQ(p->source, "seed 000");
    CHECK_INT_EQ(p->cc_major * 10 + p->cc_minor, 90);
    p = find(&table, "h200"); /* seed 001 */
    CHECK_INT_EQ(p->batch, 256);
    CHECK_INT_EQ(p->prefetch_factor, 4);
    CHECK(p->tf32 && p->precision == STOKE_PREC_BF16);
    p = find(&table, "rtx-3090"); /* seed 002 */
    CHECK_INT_EQ(p->batch, 128);
    CHECK_INT_EQ(p->workers, 8);
    CHECK_INT_EQ(p->prefetch_factor, 4);
    CHECK_INT_EQ(p->precision, STOKE_PREC_FP16);
    CHECK_STR_CONTAINS(p->batch_for, "300W-LP");
    static const struct {
        const char *name;
        int batch, workers, prefetch;
    } seed003[] = {{"rtx-5090", 8192, 8, 16}, {"rtx-4090", 7168, 8, 16}, {"rtx-4080", 5120, 6, 12}};
    for (size_t i = 0; i < sizeof seed003 / sizeof seed003[0]; i++) {
        p = find(&table, seed003[i].name);
        CHECK_INT_EQ(p->batch, seed003[i].batch);
        CHECK_INT_EQ(p->workers, seed003[i].workers);
        CHECK_INT_EQ(p->workers_for_cores, 16);
        CHECK_INT_EQ(p->prefetch_factor, seed003[i].prefetch);
        CHECK_STR_EQ(p->source, "seed 003");
    }
    for (int i = 0; i < 3; i++) {
        p = find(&table, (const char *[]){"a100", "l4", "cpu"}[i]);
        CHECK_STR_EQ(p->source, "stoke's own");
        CHECK_INT_EQ(p->batch, 0); /* no seed's batch: the memory fit decides */
    }
    CHECK(p->cpu_only && p->precision_auto && !p->tf32);
}

/* A valid one-profile file with `line` replaced (or, if `line` is NULL, as is). */
static const char base[] = "version: 1\n"
                           "profiles:\n"
                           "  - name: x\n"
                           "    match:\n"
                           "      gpu_names: [X 1]\n"
                           "    workers: 2\n"
                           "    prefetch_factor: 2\n"
                           "    precision: bf16\n"
                           "    tf32: true\n"
                           "    source: test\n"
                           "    note: a test\n";

/* Parses `text`; expects a refusal whose message contains each of the NULL-ended
 * parts. */
static void refused(const char *text, ...)
{
    stoke_status s = stoke_profiles_parse(text, strlen(text), "p.yaml", &table);
    CHECK_MSG(s == STOKE_ERR_FORMAT, "accepted (status %d): %s", s, text);
    CHECK_INT_EQ(table.count, 0);
    va_list ap;
    va_start(ap, text);
    for (const char *part; (part = va_arg(ap, const char *));)
        CHECK_STR_CONTAINS(stoke_last_error(), part);
    va_end(ap);
}

/* base with the line starting with `key` (its first occurrence) replaced by `with`
 * ("" removes it). */
static const char *edit(const char *key, const char *with)
{
    static char buf[2048];
    const char *at = strstr(base, key);
    CHECK(at != NULL);
    const char *eol = strchr(at, '\n') + 1;
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - base), base, with, eol);
    return buf;
}

static void test_refusals(void)
{
    CHECK_INT_EQ(stoke_profiles_parse(base, strlen(base), "p.yaml", &table), STOKE_OK);
    CHECK_INT_EQ(table.count, 1);
    CHECK_STR_EQ(table.items[0].gpu_names[0], "X 1");

    /* unknown keys, at each level, named with where they are */
    refused(edit("version", "version: 1\nextra: 3\n"), "p.yaml:2:1: extra: unknown key", NULL);
    refused(edit("    tf32", "    tf32: true\n    batchsize: 4\n"),
            "p.yaml:10:5: profile: unknown key 'batchsize'", NULL);
    refused(edit("      gpu_names", "      gpu_names: [X]\n      vendor: nv\n"),
            "p.yaml:6:7: match: unknown key 'vendor'", NULL);
    /* duplicates (yaml_util's check, naming both lines) */
    refused(edit("    workers", "    workers: 2\n    workers: 3\n"), "p.yaml:7:5",
            "workers: key given twice (first at line 6)", NULL);
    /* wrong types */
    refused(edit("    workers", "    workers: many\n"), "p.yaml:6:14: workers: expected a whole",
            "got 'many'", NULL);
    refused(edit("    tf32", "    tf32: yes\n"), "tf32: expected true or false", NULL);
    refused(edit("    precision", "    precision: fp8\n"), "precision: expected auto, fp32", NULL);
    refused(edit("      gpu_names", "      gpu_names: H100\n"), "match.gpu_names: expected a list",
            NULL);
    refused(edit("    note", "    note: [a]\n"), "note: expected text", "got a list", NULL);
    refused("version: 1\nprofiles: 3\n", "p.yaml:2:11: profiles: expected a list", NULL);
    refused("- a\n", "p.yaml:1:1: profiles: expected a mapping", NULL);
    /* absurd values */
    refused(edit("    workers", "    workers: 100000\n"),
            "workers: expected a whole number in [0, 256]", NULL);
    refused(edit("    workers", "    workers: -1\n"), "[0, 256]", NULL);
    refused(edit("    prefetch_factor", "    prefetch_factor: 0\n"), "prefetch_factor", "[1, 64]",
            NULL);
    refused(edit("    tf32", "    tf32: true\n    batch: 0\n    batch_for: m\n"), "batch:", "[1, ",
            NULL);
    refused(edit("      gpu_names", "      compute_capability: \"8.x\"\n"),
            "match.compute_capability: expected a compute capability", NULL);
    refused(edit("      gpu_names", "      gpu_names: [X]\n      memory_gb: -1\n"),
            "match.memory_gb: expected gigabytes", NULL);
    refused(edit("version", "version: 2\n"), "version: expected a whole number in [1, 1]", NULL);
    /* what config files refuse */
    refused(edit("    note", "    note: &n a\n    source2: *n\n"), "aliases (*n) are not supported",
            NULL);
    char deep[2048] = "version: 1\nprofiles: ";
    for (int i = 0; i < 300; i++)
        strcat(deep, "[");
    refused(deep, "nested deeper than", NULL);
    refused(edit("    source", "    source: !!str t\n"), "tags (!!str)", NULL);
    /* missing, inconsistent, repeated */
    refused(edit("    note", ""), "p.yaml:3:5: note: missing in profile 'x'", NULL);
    refused(edit("    tf32", "    tf32: true\n    batch: 4\n"), "batch_for: batch and batch_for",
            NULL);
    refused(edit("      gpu_names", "      cpu_only: false\n"), "match.cpu_only: only 'true'",
            NULL);
    refused(edit("      gpu_names", "      cpu_only: true\n"), "tf32: the CPU has no TF32", NULL);
    refused(edit("      gpu_names", "      memory_gb: 8\n"), "match: matches nothing", NULL);
    refused(edit("    workers", "    workers: 2\n    workers_max: 4\n"),
            "workers_max: caps a scaled count", NULL);
    char twice[1024];
    snprintf(twice, sizeof twice, "%s%s", base, strstr(base, "  - name"));
    refused(twice, "p.yaml:12:5: name: profile 'x' given twice", NULL);
    refused("", "profiles: expected a mapping", NULL);
    refused("version: 1\n", "profiles: missing", NULL);
}

/* STOKE_PROFILES replaces the built-in table; a missing file names itself. */
static void test_env(void)
{
    char path[] = "/tmp/stoke-profiles-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, base, strlen(base)) == (ssize_t)strlen(base));
    close(fd);
    setenv("STOKE_PROFILES", path, 1);
    CHECK_INT_EQ(stoke_profiles_load(&table), STOKE_OK);
    CHECK_INT_EQ(table.count, 1);
    CHECK_STR_EQ(table.origin, path);
    unlink(path);
    CHECK(stoke_profiles_load(&table) != STOKE_OK);
    CHECK_STR_CONTAINS(stoke_last_error(), path);
    unsetenv("STOKE_PROFILES");
}

int main(void)
{
    test_builtin();
    test_refusals();
    test_env();
    return CHECK_DONE();
}
