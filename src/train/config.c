/* config.c - the training configuration: one table of keys with their types and
 * environment variables, set from defaults < YAML file < environment < flags. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "core/env.h"
#include "core/json.h"
#include "core/parse.h"
#include "stoke/tune.h"
#include "train/train_impl.h"
#include "train/yaml_util.h"

/* T_FRACTION: 0 < x <= 1, or a percentage "90%"; 0 = off. T_SIZES: "512,512", a list
 * of layer sizes kept as text; "" = the model's own. */
/* The tuner's "decide" values of its integer settings (trainer.h: workers < 0,
 * prefetch and threads 0) are what "auto" stores, so every source can ask for it. */
#define AUTO_NO INT64_MIN

typedef enum { T_STR, T_INT, T_U64, T_DOUBLE, T_BOOL, T_FRACTION, T_SIZES } key_type;

static const struct key {
    const char *name;
    key_type type;
    size_t off;
    size_t size;         /* T_STR: buffer size */
    double min, max;     /* T_INT, T_DOUBLE */
    const char *env;     /* environment variable, or NULL */
    const char *choices; /* T_STR with fixed values: " a b c " */
    int64_t auto_value;  /* T_INT the tuner decides: what "auto" stores; else AUTO_NO */
} keys[] = {
#define S(n, ch)                                                                              \
    {                                                                                         \
#n, T_STR, offsetof(stoke_train_config, n), sizeof((stoke_train_config *)0)->n, 0, 0, \
            NULL, ch, AUTO_NO                                                                 \
    }
#define I(n, lo, hi, env)                                                         \
    {                                                                             \
#n, T_INT, offsetof(stoke_train_config, n), 0, lo, hi, env, NULL, AUTO_NO \
    }
#define D(n, lo, hi, env)                                                            \
    {                                                                                \
#n, T_DOUBLE, offsetof(stoke_train_config, n), 0, lo, hi, env, NULL, AUTO_NO \
    }
#define B(n)                                                                      \
    {                                                                             \
#n, T_BOOL, offsetof(stoke_train_config, n), 0, 0, 0, NULL, NULL, AUTO_NO \
    }
    S(dataset, NULL),
    S(val_dataset, NULL),
    S(model, NULL),
    {"hidden", T_SIZES, offsetof(stoke_train_config, hidden),
     sizeof((stoke_train_config *)0)->hidden, 1, 1 << 20, NULL, NULL, AUTO_NO},
    I(epochs, 1, 1e6, "EPOCHS"),
    I(max_steps, 0, 1e15, NULL),
    /* auto (0): tune/batch.c's rule on train/batch.c's memory fit (memory_safety x free) */
    {"batch_size", T_INT, offsetof(stoke_train_config, batch_size), 0, 1, STOKE_MAX_BATCH,
     "BATCH_SIZE", NULL, 0},
    I(val_batch_size, 1, STOKE_MAX_BATCH, "VAL_BATCH_SIZE"),
    I(accumulate, 1, 1 << 16, "ACCUMULATE"),
    I(effective_batch, 0, 1 << 30, "EFFECTIVE_BATCH"),
    {"memory_safety", T_FRACTION, offsetof(stoke_train_config, memory_safety), 0, 0, 1, NULL, NULL,
     AUTO_NO},
    B(batch_pow2),
    I(limit, 0, 1e15, NULL),
    I(val_limit, 0, 1e15, NULL),
    {"workers", T_INT, offsetof(stoke_train_config, workers), 0, -1, 256, "NUM_WORKERS", NULL, -1},
    {"prefetch", T_INT, offsetof(stoke_train_config, prefetch), 0, 0, 1024, "PREFETCH_FACTOR", NULL,
     0},
    {"threads", T_INT, offsetof(stoke_train_config, threads), 0, 0, 4096, NULL, NULL, 0},
    I(loader_delay_us, 0, 1e6, NULL),
    {"precision", T_STR, offsetof(stoke_train_config, precision),
     sizeof((stoke_train_config *)0)->precision, 0, 0, "PRECISION", " auto fp32 bf16 fp16 ",
     AUTO_NO},
    /* auto, cpu, cuda or cuda:N (stoke_device_check) */
    {"device", T_STR, offsetof(stoke_train_config, device), sizeof((stoke_train_config *)0)->device,
     0, 0, "STOKE_DEVICE", NULL, AUTO_NO},
    {"recompute", T_STR, offsetof(stoke_train_config, recompute),
     sizeof((stoke_train_config *)0)->recompute, 0, 0, "STOKE_RECOMPUTE", " off on auto ", AUTO_NO},
    /* what `auto` measures by (tune.c): trials (and the cache), the cache alone, or
     * nothing (the rules decide, as for a setting left unset) */
    {"tune", T_STR, offsetof(stoke_train_config, tune), sizeof((stoke_train_config *)0)->tune, 0, 0,
     "STOKE_TUNE", " trials cache off ", AUTO_NO},
    S(optimizer, " sgd adamw "),
    D(lr, 0, 1e3, "LR"),
    D(momentum, 0, 0.9999, NULL),
    B(nesterov),
    D(weight_decay, 0, 10, NULL),
    D(clip_norm, 0, 1e9, NULL),
    S(schedule, " constant step cosine "),
    I(warmup_steps, 0, 1e12, NULL),
    I(step_size, 1, 1e12, NULL),
    D(gamma, 0, 1, NULL),
    D(min_lr, 0, 1e3, NULL),
    B(augment),
    S(transforms, " crop rrc crop+jitter rrc+jitter "),
    {"seed", T_U64, offsetof(stoke_train_config, seed), 0, 0, 0, "SEED", NULL, AUTO_NO},
    S(checkpoint, NULL),
    S(resume, NULL),
    S(log, NULL),
    S(report, NULL),
    I(log_every, 1, 1e12, NULL),
    I(eval_every, 0, 1e12, NULL),
    {"target_accuracy", T_FRACTION, offsetof(stoke_train_config, target_accuracy), 0, 0, 1, NULL,
     NULL, AUTO_NO},
    B(dry_run),
    D(memory_budget, 0, 1e18, NULL),
    B(monitor),
#undef S
#undef I
#undef D
#undef B
};
#define N_KEYS ((int)(sizeof keys / sizeof keys[0]))
_Static_assert(sizeof keys / sizeof keys[0] <= STOKE_CFG_MAX_KEYS, "source[] too small");

const char *stoke_train_config_key(int i) { return i >= 0 && i < N_KEYS ? keys[i].name : NULL; }

const char *stoke_train_config_env(int i) { return i >= 0 && i < N_KEYS ? keys[i].env : NULL; }

const char *stoke_cfg_source_name(stoke_cfg_source s)
{
    static const char *n[] = {"default", "file", "env", "flag", "checkpoint"};
    return (unsigned)s < sizeof n / sizeof n[0] ? n[s] : "?";
}

void stoke_train_config_defaults(stoke_train_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dataset, sizeof c->dataset, "/usr/share/datasets/fashion-mnist");
    snprintf(c->model, sizeof c->model, "cnn");
    c->epochs = 3;
    c->batch_size = 128;
    c->val_batch_size = 256;
    c->accumulate = 1;
    c->memory_safety = 0.7;
    c->batch_pow2 = true;
    snprintf(c->transforms, sizeof c->transforms, "crop");
    c->workers = -1;
    snprintf(c->precision, sizeof c->precision, "auto");
    snprintf(c->device, sizeof c->device, "auto");
    snprintf(c->recompute, sizeof c->recompute, "off");
    snprintf(c->tune, sizeof c->tune, "trials");
    snprintf(c->optimizer, sizeof c->optimizer, "sgd");
    c->lr = 0.05;
    c->momentum = 0.9;
    snprintf(c->schedule, sizeof c->schedule, "cosine");
    c->step_size = 1000;
    c->gamma = 0.1;
    c->seed = 1;
    c->log_every = 10;
    c->monitor = true;
}

/* Keys are matched with '-' and '_' taken as the same, so --batch-size and batch_size
 * name one setting. */
static int find_key(const char *key)
{
    for (int i = 0; i < N_KEYS; i++) {
        const char *a = keys[i].name, *b = key;
        while (*a && (*a == *b || (*a == '_' && *b == '-')))
            a++, b++;
        if (!*a && !*b)
            return i;
    }
    return -1;
}

int stoke_train_config_find(const char *key, bool *truth)
{
    int i = find_key(key);
    if (truth)
        *truth = i >= 0 && keys[i].type == T_BOOL;
    return i;
}

stoke_cfg_source stoke_train_config_source(const stoke_train_config *c, const char *key)
{
    int i = find_key(key);
    return i < 0 ? STOKE_CFG_DEFAULT : c->source[i];
}

static bool parse_bool(const char *v, bool *out)
{
    if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        *out = true;
    else if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no") ||
             !strcasecmp(v, "off"))
        *out = false;
    else
        return false;
    return true;
}

/* Accepts 512M / 2G / 1.5e9 for byte counts: a budget is easier to say that way. */
static bool parse_number(const char *v, bool bytes, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || errno || !isfinite(d))
        return false;
    if (bytes && *end) {
        const char *u = "KMGT";
        const char *p = strchr(u, *end == 'k' ? 'K' : *end);
        if (!p || end[1])
            return false;
        for (const char *q = u; q <= p; q++)
            d *= 1e3;
        end++;
    }
    if (*end)
        return false;
    *out = d;
    return true;
}

/* "90%" -> 0.9, "0.9" -> 0.9, "0" -> 0 (off). A bare number above 1 is refused rather
 * than guessed to be a percentage. */
static bool parse_fraction(const char *v, double *out)
{
    char num[64];
    size_t n = strlen(v);
    bool pct = n > 0 && v[n - 1] == '%';
    if (n == 0 || n >= sizeof num)
        return false;
    snprintf(num, sizeof num, "%.*s", (int)(pct ? n - 1 : n), v);
    double d;
    if (!parse_number(num, false, &d) || d < 0)
        return false;
    if (pct)
        d /= 100;
    if (d > 1)
        return false;
    *out = d;
    return true;
}

/* "512,512" (spaces allowed around the commas): 1 to TRAIN_MAX_HIDDEN whole numbers in
 * [lo, hi]; "" is the model's default. */
static bool parse_sizes(const char *v, double lo, double hi)
{
    int n = 0;
    const char *p = v;
    while (*p == ' ')
        p++;
    if (!*p)
        return true;
    for (;;) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < lo || x > hi || ++n > TRAIN_MAX_HIDDEN)
            return false;
        p = end;
        while (*p == ' ')
            p++;
        if (!*p)
            return true;
        if (*p++ != ',')
            return false;
        while (*p == ' ')
            p++;
    }
}

stoke_status stoke_train_config_set(stoke_train_config *c, const char *key, const char *value,
                                    stoke_cfg_source src)
{
    int i = find_key(key);
    if (i < 0)
        return stoke_fail(STOKE_ERR_ARG, "unknown setting '%s'", key);
    const struct key *k = &keys[i];
    char *field = (char *)c + k->off;
    switch (k->type) {
    case T_STR: {
        if (strlen(value) >= k->size) /* its start: a megabyte would bury the message */
            return stoke_fail(STOKE_ERR_ARG, "%s: '%.40s...' (%zu characters) is longer than %zu",
                              k->name, value, strlen(value), k->size - 1);
        if (k->choices) {
            char want[32];
            snprintf(want, sizeof want, " %s ", value);
            if (!*value || strchr(value, ' ') || !strstr(k->choices, want))
                return stoke_fail(STOKE_ERR_ARG, "%s: '%s' is not one of%s", k->name, value,
                                  k->choices);
        }
        /* checked here, not only by the decision, so the error names its source */
        if (!strcmp(k->name, "device") && stoke_device_check(value) != STOKE_OK)
            return STOKE_ERR_ARG;
        snprintf(field, k->size, "%s", value);
        break;
    }
    case T_INT: {
        double d;
        if (!strcasecmp(value, "auto")) {
            if (k->auto_value != AUTO_NO) {
                *(int64_t *)(void *)field = k->auto_value;
                break;
            }
            return stoke_fail(STOKE_ERR_ARG,
                              "%s: 'auto' is for the settings the tuner decides (batch_size, "
                              "workers, prefetch, threads, precision, device, recompute); give a "
                              "whole "
                              "number in [%.0f, %.0f]",
                              k->name, k->min, k->max);
        }
        if (!parse_number(value, false, &d) || d != floor(d) || d < k->min || d > k->max)
            return stoke_fail(STOKE_ERR_ARG, "%s: '%s' is not a whole number in [%.0f, %.0f]",
                              k->name, value, k->min, k->max);
        *(int64_t *)(void *)field = (int64_t)d;
        break;
    }
    case T_U64: {
        uint64_t u;
        if (!stoke_parse_u64(value, &u))
            return stoke_fail(STOKE_ERR_ARG,
                              "%s: '%s' is not a whole number in [0, 18446744073709551615] "
                              "(digits only: no sign or blank)",
                              k->name, value);
        *(uint64_t *)(void *)field = u;
        break;
    }
    case T_DOUBLE: {
        double d;
        if (!parse_number(value, !strcmp(k->name, "memory_budget"), &d) || d < k->min || d > k->max)
            return stoke_fail(STOKE_ERR_ARG, "%s: '%s' is not a number in [%g, %g]", k->name, value,
                              k->min, k->max);
        *(double *)(void *)field = d;
        break;
    }
    case T_BOOL:
        if (!parse_bool(value, (bool *)field))
            return stoke_fail(STOKE_ERR_ARG, "%s: '%s' is not true or false", k->name, value);
        break;
    case T_FRACTION: {
        double d;
        /* a safety factor of 0 would plan for no memory at all: it has no "off" */
        bool zero_ok = strcmp(k->name, "memory_safety") != 0;
        if (!parse_fraction(value, &d) || (d == 0 && !zero_ok))
            return stoke_fail(STOKE_ERR_ARG,
                              "%s: '%s' is not a fraction in (0, 1] such as 0.9, "
                              "or a percentage such as 90%%%s",
                              k->name, value, zero_ok ? " (0 = off)" : "");
        *(double *)(void *)field = d;
        break;
    }
    case T_SIZES:
        if (strlen(value) >= k->size || !parse_sizes(value, k->min, k->max))
            return stoke_fail(STOKE_ERR_ARG,
                              "%s: '%.80s%s' is not a list of 1 to %d sizes in "
                              "[%.0f, %.0f] separated by commas, such as 512,512",
                              k->name, value, strlen(value) > 80 ? "..." : "", TRAIN_MAX_HIDDEN,
                              k->min, k->max);
        snprintf(field, k->size, "%s", value + strspn(value, " ")); /* blank: the default */
        break;
    }
    c->source[i] = src;
    return STOKE_OK;
}

stoke_status stoke_train_config_load_env(stoke_train_config *c,
                                         const char *(*getenv_fn)(const char *name))
{
    /* the table's variables and the three below, each by its name */
    const char *(*get)(const char *name) = getenv_fn ? getenv_fn : stoke_env;
    for (int i = 0; i < N_KEYS; i++) {
        if (!keys[i].env)
            continue;
        const char *v = get(keys[i].env);
        if (!v || !*v)
            continue;
        if (stoke_train_config_set(c, keys[i].name, v, STOKE_CFG_ENV) != STOKE_OK)
            return train_wrap_error(STOKE_ERR_ARG, "environment %s=%s", keys[i].env, v);
    }
    /* Fusion changes no value, only speed and memory (for before/after measurements),
     * so it is an environment switch of the models' options, not a setting. */
    const char *nf = get("STOKE_NO_FUSION");
    c->no_fusion = nf && *nf && strcmp(nf, "0") != 0;
    /* AMP=true is the seeds' switch for mixed precision: bf16 here (no loss scaling,
     * emulated exactly where the CPU lacks bf16 instructions); AMP=false is fp32. */
    const char *amp = get("AMP");
    if (amp && *amp) {
        bool on;
        if (!parse_bool(amp, &on))
            return stoke_fail(STOKE_ERR_ARG,
                              "environment AMP=%s: precision: expected true or false", amp);
        /* two variables for one setting: neither may silently win */
        const char *p = get("PRECISION");
        if (p && *p)
            return stoke_fail(STOKE_ERR_ARG,
                              "environment AMP=%s and PRECISION=%s: both set the precision; "
                              "unset one",
                              amp, p);
        stoke_train_config_set(c, "precision", on ? "bf16" : "fp32", STOKE_CFG_ENV);
    }
    return STOKE_OK;
}

/* Applies the mapping of settings in `size` bytes of `data`; `name` names the source in
 * messages. Keys go through train_yaml_load's duplicate check with '-' taken as '_',
 * as find_key matches them. */
stoke_status stoke_train_config_parse(stoke_train_config *c, const char *data, size_t size,
                                      const char *name)
{
    yaml_document_t doc;
    stoke_status s = train_yaml_load(data, size, name, true, &doc);
    if (s != STOKE_OK)
        return s;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type != YAML_MAPPING_NODE) {
        s = stoke_fail(STOKE_ERR_FORMAT,
                       "%s:%zu:%zu: expected a mapping of settings "
                       "(batch_size: 256, ...)",
                       name, root->start_mark.line + 1, root->start_mark.column + 1);
    }
    for (yaml_node_pair_t *p = root && s == STOKE_OK ? root->data.mapping.pairs.start : NULL;
         p && p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&doc, p->key);
        yaml_node_t *v = yaml_document_get_node(&doc, p->value);
        char what[96];
        if (k->type != YAML_SCALAR_NODE) {
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s:%zu:%zu: settings are plain key: value pairs; "
                           "this key is %s",
                           name, k->start_mark.line + 1, k->start_mark.column + 1,
                           train_yaml_what(k, what, sizeof what));
            break;
        }
        const char *key = (const char *)k->data.scalar.value;
        /* The value's own position: a wrong value is rarely on its key's column. */
        if (v->type != YAML_SCALAR_NODE || train_yaml_is_null(v)) {
            s = stoke_fail(STOKE_ERR_FORMAT, "%s:%zu:%zu: %s: expected %s, got %s", name,
                           v->start_mark.line + 1, v->start_mark.column + 1, key,
                           v->type == YAML_SCALAR_NODE ? "a value" : "a single value (a scalar)",
                           train_yaml_what(v, what, sizeof what));
            break;
        }
        if (stoke_train_config_set(c, key, (const char *)v->data.scalar.value, STOKE_CFG_FILE) !=
            STOKE_OK) {
            const yaml_node_t *at = find_key(key) < 0 ? k : v; /* what is wrong */
            s = train_wrap_error(STOKE_ERR_FORMAT, "%s:%zu:%zu", name, at->start_mark.line + 1,
                                 at->start_mark.column + 1);
            break;
        }
    }
    yaml_document_delete(&doc);
    return s;
}

stoke_status stoke_train_config_load_file(stoke_train_config *c, const char *path)
{
    char *text;
    size_t len;
    stoke_status s = train_yaml_read_file(path, NULL, &text, &len);
    if (s != STOKE_OK)
        return s;
    s = stoke_train_config_parse(c, text, len, path);
    free(text);
    return s;
}

stoke_status train_config_bytes(const stoke_train_config *c, char **json)
{
    *json = NULL;
    cJSON *o = NULL;
    for (int i = 0; i < N_KEYS; i++) {
        const char *field = (const char *)c + keys[i].off;
        if ((keys[i].type != T_STR && keys[i].type != T_SIZES) || stoke_utf8_valid(field))
            continue;
        char hex[2 * sizeof((stoke_train_config *)0)->dataset + 1];
        size_t n = strlen(field);
        for (size_t j = 0; j < n && 2 * j + 2 < sizeof hex; j++)
            snprintf(hex + 2 * j, 3, "%02x", (unsigned char)field[j]);
        if ((!o && !(o = cJSON_CreateObject())) || !cJSON_AddStringToObject(o, keys[i].name, hex)) {
            cJSON_Delete(o);
            return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
        }
    }
    if (o && !(*json = stoke_json_print(o, false))) {
        cJSON_Delete(o);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(o);
    return STOKE_OK;
}

char *stoke_train_config_json(const stoke_train_config *c)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    for (int i = 0; i < N_KEYS; i++) {
        const char *field = (const char *)c + keys[i].off;
        switch (keys[i].type) {
        case T_STR:
        case T_SIZES: cJSON_AddStringToObject(o, keys[i].name, field); break;
        case T_INT:
            cJSON_AddNumberToObject(o, keys[i].name, (double)*(const int64_t *)(const void *)field);
            break;
        case T_U64: {
            /* A string: a 64-bit seed does not survive a JSON double. */
            char b[32];
            snprintf(b, sizeof b, "%" PRIu64, *(const uint64_t *)(const void *)field);
            cJSON_AddStringToObject(o, keys[i].name, b);
            break;
        }
        case T_DOUBLE:
        case T_FRACTION:
            cJSON_AddNumberToObject(o, keys[i].name, *(const double *)(const void *)field);
            break;
        case T_BOOL: cJSON_AddBoolToObject(o, keys[i].name, *(const bool *)field); break;
        }
    }
    char *s = stoke_json_print(o, false);
    cJSON_Delete(o);
    return s;
}
