/* profiles.c - the hardware profile table (docs/profiles.md) read from YAML: the
 * built-in data/profiles.yaml (embedded at build time) or STOKE_PROFILES's file. It is
 * read here because the train module owns the YAML reader (yaml_util.c: depth,
 * aliases, tags, duplicate keys); the tune module, which may not reach train, gets the
 * parsed table and only matches it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "core/env.h"
#include "stoke/train.h"
#include "train/yaml_util.h"

/* The build's copy of data/profiles.yaml (CMake writes it into the build tree). */
extern const unsigned char stoke_profiles_builtin[];
extern const size_t stoke_profiles_builtin_len;

typedef struct ctx {
    const char *file;
    yaml_document_t *doc;
} ctx;

#define WHAT(n) train_yaml_what((n), (char[96]){0}, 96)

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE && !train_yaml_is_null(n)
               ? (const char *)n->data.scalar.value
               : NULL;
}

static yaml_node_t *node(const ctx *c, int i) { return yaml_document_get_node(c->doc, i); }

static stoke_status get_int(const ctx *c, const yaml_node_t *n, const char *field, long min,
                            long max, long *out)
{
    const char *s = scalar(n);
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < min || v > max)
        return train_yaml_fail(c->file, n, field, "expected a whole number in [%ld, %ld], got %s",
                               min, max, WHAT(n));
    *out = v;
    return STOKE_OK;
}

static stoke_status get_text(const ctx *c, const yaml_node_t *n, const char *field, char *dst,
                             size_t size)
{
    const char *s = scalar(n);
    if (!s || !*s || strlen(s) >= size)
        return train_yaml_fail(c->file, n, field, "expected text of 1 to %zu characters, got %s",
                               size - 1, s && *s ? "a longer text" : WHAT(n));
    memcpy(dst, s, strlen(s) + 1);
    return STOKE_OK;
}

static stoke_status get_bool(const ctx *c, const yaml_node_t *n, const char *field, bool *out)
{
    const char *s = scalar(n);
    if (s && (!strcmp(s, "true") || !strcmp(s, "false"))) {
        *out = s[0] == 't';
        return STOKE_OK;
    }
    return train_yaml_fail(c->file, n, field, "expected true or false, got %s", WHAT(n));
}

/* "MAJOR.MINOR", as NVML and the probe write a compute capability. */
static stoke_status get_cc(const ctx *c, const yaml_node_t *n, const char *field, int *major,
                           int *minor)
{
    const char *s = scalar(n);
    int a, b, used = 0;
    if (!s || sscanf(s, "%2d.%1d%n", &a, &b, &used) != 2 || s[used] || a < 1 || b < 0)
        return train_yaml_fail(c->file, n, field,
                               "expected a compute capability such as \"8.6\", got %s", WHAT(n));
    *major = a;
    *minor = b;
    return STOKE_OK;
}

static stoke_status get_memory(const ctx *c, const yaml_node_t *n, const char *field, double *out)
{
    const char *s = scalar(n);
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    /* 0 < v: a class of no memory matches nothing; 10 TB is past any GPU for years */
    if (!s || !*s || *end || errno || !(v > 0 && v <= 10000))
        return train_yaml_fail(c->file, n, field, "expected gigabytes in (0, 10000], got %s",
                               WHAT(n));
    *out = v;
    return STOKE_OK;
}

/* Names of profiles and GPUs: printable, no control characters (they are printed). */
static bool printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

static stoke_status parse_names(const ctx *c, const yaml_node_t *n, stoke_profile *p)
{
    if (n->type != YAML_SEQUENCE_NODE || n->data.sequence.items.start == n->data.sequence.items.top)
        return train_yaml_fail(c->file, n, "match.gpu_names",
                               "expected a list of NVML name parts, got %s", WHAT(n));
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
        if (p->gpu_name_count == STOKE_PROFILE_MAX_NAMES)
            return train_yaml_fail(c->file, node(c, *i), "match.gpu_names", "more than %d names",
                                   STOKE_PROFILE_MAX_NAMES);
        char *dst = p->gpu_names[p->gpu_name_count];
        stoke_status s = get_text(c, node(c, *i), "match.gpu_names", dst, sizeof p->gpu_names[0]);
        if (s != STOKE_OK)
            return s;
        if (!printable(dst))
            return train_yaml_fail(c->file, node(c, *i), "match.gpu_names",
                                   "a control character in '%s'", dst);
        p->gpu_name_count++;
    }
    return STOKE_OK;
}

static stoke_status parse_match(const ctx *c, const yaml_node_t *n, stoke_profile *p)
{
    if (n->type != YAML_MAPPING_NODE)
        return train_yaml_fail(c->file, n, "match", "expected a mapping, got %s", WHAT(n));
    bool has_class = false;
    for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < n->data.mapping.pairs.top; q++) {
        yaml_node_t *k = node(c, q->key), *v = node(c, q->value);
        const char *key = scalar(k);
        stoke_status s = STOKE_OK;
        if (!key)
            return train_yaml_fail(c->file, k, "match", "expected a key, got %s", WHAT(k));
        if (!strcmp(key, "gpu_names")) {
            s = parse_names(c, v, p);
        } else if (!strcmp(key, "compute_capability")) {
            s = get_cc(c, v, "match.compute_capability", &p->cc_major, &p->cc_minor);
            has_class = true;
        } else if (!strcmp(key, "memory_gb")) {
            s = get_memory(c, v, "match.memory_gb", &p->memory_gb);
        } else if (!strcmp(key, "cpu_only")) {
            s = get_bool(c, v, "match.cpu_only", &p->cpu_only);
            if (s == STOKE_OK && !p->cpu_only)
                s = train_yaml_fail(c->file, v, "match.cpu_only",
                                    "only 'true' means something: leave it out");
        } else {
            return train_yaml_fail(c->file, k, "match",
                                   "unknown key '%.64s' (gpu_names, compute_capability, "
                                   "memory_gb, cpu_only)",
                                   key);
        }
        if (s != STOKE_OK)
            return s;
    }
    if (p->cpu_only && (p->gpu_name_count || has_class || p->memory_gb > 0))
        return train_yaml_fail(c->file, n, "match",
                               "cpu_only matches no GPU: no gpu_names, "
                               "compute_capability or memory_gb with it");
    if (!p->cpu_only && !p->gpu_name_count && !has_class)
        return train_yaml_fail(c->file, n, "match",
                               "matches nothing: give gpu_names, a compute_capability, "
                               "or cpu_only: true");
    return STOKE_OK;
}

static stoke_status parse_precision(const ctx *c, const yaml_node_t *n, stoke_profile *p)
{
    const char *s = scalar(n);
    if (s && !strcmp(s, "auto")) {
        p->precision_auto = true;
        return STOKE_OK;
    }
    if (!s || !stoke_precision_parse(s, &p->precision))
        return train_yaml_fail(c->file, n, "precision", "expected auto, fp32, bf16 or fp16, got %s",
                               WHAT(n));
    return STOKE_OK;
}

/* The fields whose presence is checked: the first REQUIRED must be given; batch and
 * batch_for go together. */
enum { F_BATCH = 1 << 8, F_BATCH_FOR = 1 << 9, REQUIRED = 8 };
static const struct {
    unsigned bit;
    const char *key;
} fields[] = {{1, "name"},        {2, "match"},
              {4, "workers"},     {8, "prefetch_factor"},
              {16, "precision"},  {32, "tf32"},
              {64, "source"},     {128, "note"},
              {F_BATCH, "batch"}, {F_BATCH_FOR, "batch_for"}};

static stoke_status parse_field(const ctx *c, const char *key, const yaml_node_t *k,
                                const yaml_node_t *v, stoke_profile *p)
{
    long x;
    stoke_status s;
    /* bounds: nothing a seed or a machine comes near, far from int overflow */
    if (!strcmp(key, "name")) {
        s = get_text(c, v, "name", p->name, sizeof p->name);
        if (s == STOKE_OK && !printable(p->name))
            s = train_yaml_fail(c->file, v, "name", "a control character in the name");
        return s;
    }
    if (!strcmp(key, "match"))
        return parse_match(c, v, p);
    if (!strcmp(key, "batch")) {
        s = get_int(c, v, "batch", 1, STOKE_MAX_BATCH, &x);
        p->batch = x;
        return s;
    }
    if (!strcmp(key, "batch_for"))
        return get_text(c, v, "batch_for", p->batch_for, sizeof p->batch_for);
    if (!strcmp(key, "workers")) {
        s = get_int(c, v, "workers", 0, 256, &x);
        p->workers = (int)x;
        return s;
    }
    if (!strcmp(key, "workers_for_cores")) {
        s = get_int(c, v, "workers_for_cores", 1, 4096, &x);
        p->workers_for_cores = (int)x;
        return s;
    }
    if (!strcmp(key, "workers_max")) {
        s = get_int(c, v, "workers_max", 1, 256, &x);
        p->workers_max = (int)x;
        return s;
    }
    if (!strcmp(key, "prefetch_factor")) {
        s = get_int(c, v, "prefetch_factor", 1, 64, &x);
        p->prefetch_factor = (int)x;
        return s;
    }
    if (!strcmp(key, "precision"))
        return parse_precision(c, v, p);
    if (!strcmp(key, "tf32"))
        return get_bool(c, v, "tf32", &p->tf32);
    if (!strcmp(key, "source"))
        return get_text(c, v, "source", p->source, sizeof p->source);
    if (!strcmp(key, "note"))
        return get_text(c, v, "note", p->note, sizeof p->note);
    return train_yaml_fail(c->file, k, "profile",
                           "unknown key '%.64s' (docs/profiles.md lists them)", key);
}

static stoke_status parse_profile(const ctx *c, const yaml_node_t *n, stoke_profile *p)
{
    if (n->type != YAML_MAPPING_NODE)
        return train_yaml_fail(c->file, n, "profiles", "expected a mapping per profile, got %s",
                               WHAT(n));
    unsigned seen = 0;
    for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < n->data.mapping.pairs.top; q++) {
        yaml_node_t *k = node(c, q->key), *v = node(c, q->value);
        const char *key = scalar(k);
        if (!key)
            return train_yaml_fail(c->file, k, "profile", "expected a key, got %s", WHAT(k));
        for (size_t j = 0; j < sizeof fields / sizeof fields[0]; j++)
            if (!strcmp(key, fields[j].key))
                seen |= fields[j].bit;
        stoke_status s = parse_field(c, key, k, v, p);
        if (s != STOKE_OK)
            return s;
    }
    for (size_t i = 0; i < REQUIRED; i++)
        if (!(seen & fields[i].bit))
            return train_yaml_fail(c->file, n, fields[i].key, "missing in profile '%s'",
                                   p->name[0] ? p->name : "(unnamed)");
    if (!(seen & F_BATCH) != !(seen & F_BATCH_FOR))
        return train_yaml_fail(c->file, n, "batch_for",
                               "batch and batch_for go together (a seed's batch is for one model)");
    if (p->workers_max && p->workers_for_cores == 0)
        return train_yaml_fail(c->file, n, "workers_max",
                               "caps a scaled count: give workers_for_cores too");
    if (p->cpu_only && p->tf32)
        return train_yaml_fail(c->file, n, "tf32", "the CPU has no TF32");
    return STOKE_OK;
}

static stoke_status parse_list(const ctx *c, const yaml_node_t *n, stoke_profiles *out)
{
    if (n->type != YAML_SEQUENCE_NODE)
        return train_yaml_fail(c->file, n, "profiles", "expected a list of profiles, got %s",
                               WHAT(n));
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
        const yaml_node_t *item = node(c, *i);
        if (out->count == STOKE_MAX_PROFILES)
            return train_yaml_fail(c->file, item, "profiles", "more than %d profiles",
                                   STOKE_MAX_PROFILES);
        stoke_profile *p = &out->items[out->count];
        memset(p, 0, sizeof *p);
        stoke_status s = parse_profile(c, item, p);
        if (s != STOKE_OK)
            return s;
        for (int j = 0; j < out->count; j++) {
            if (!strcmp(out->items[j].name, p->name))
                return train_yaml_fail(c->file, item, "name", "profile '%s' given twice", p->name);
            if (p->cpu_only && out->items[j].cpu_only)
                return train_yaml_fail(c->file, item, "match.cpu_only",
                                       "a second CPU-only profile ('%s' is one)",
                                       out->items[j].name);
        }
        out->count++;
    }
    return STOKE_OK;
}

stoke_status stoke_profiles_parse(const char *text, size_t len, const char *name,
                                  stoke_profiles *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->origin, sizeof out->origin, "%s", name);
    yaml_document_t doc;
    stoke_status s = train_yaml_load(text, len, name, false, &doc);
    if (s != STOKE_OK)
        return s;
    ctx c = {name, &doc};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    bool version = false, list = false;
    if (!root || root->type != YAML_MAPPING_NODE)
        s = train_yaml_fail(c.file, root, "profiles",
                            "expected a mapping of version and profiles, got %s", WHAT(root));
    for (yaml_node_pair_t *q = s == STOKE_OK ? root->data.mapping.pairs.start : NULL;
         q && q < root->data.mapping.pairs.top && s == STOKE_OK; q++) {
        yaml_node_t *k = node(&c, q->key), *v = node(&c, q->value);
        const char *key = scalar(k);
        long x;
        if (key && !strcmp(key, "version")) {
            version = true;
            s = get_int(&c, v, "version", 1, 1, &x);
        } else if (key && !strcmp(key, "profiles")) {
            list = true;
            s = parse_list(&c, v, out);
        } else {
            s = train_yaml_fail(c.file, k, key ? key : "(key)", "unknown key (version, profiles)");
        }
    }
    if (s == STOKE_OK && (!version || !list))
        s = train_yaml_fail(c.file, root, version ? "profiles" : "version", "missing");
    yaml_document_delete(&doc);
    if (s != STOKE_OK)
        out->count = 0;
    return s;
}

stoke_status stoke_profiles_load(stoke_profiles *out)
{
    const char *path = stoke_env("STOKE_PROFILES");
    if (!path || !*path)
        return stoke_profiles_parse((const char *)stoke_profiles_builtin,
                                    stoke_profiles_builtin_len, "built-in data/profiles.yaml", out);
    char *text;
    size_t len;
    stoke_status s = train_yaml_read_file(path, "STOKE_PROFILES", &text, &len);
    if (s != STOKE_OK)
        return s;
    s = stoke_profiles_parse(text, len, path, out);
    free(text);
    return s;
}
