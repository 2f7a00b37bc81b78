/* cmd_config.c - `stoke config show`: the settings `stoke train` would run with, each
 * with its source. The same parsing as train (cli_train_settings) and the same setup
 * as its --dry-run (probe, data, model, one stoke_decide), so what is shown is what a
 * run would do, not a second guess at it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "cli/cli.h"
#include "core/env.h"
#include "stoke/train.h"
#include "stoke/tune.h"

static const cli_opt show_opts[] = {
    {.name = "json", .type = CLI_SWITCH, .help = "one JSON object {key: {value, source, detail}}"},
    {0}};

void cmd_config_usage(void)
{
    cli_print_usage("usage: stoke config show", 18, (const cli_opt *[]){show_opts, NULL},
                    "[train's options]");
    printf("\n"
           "Prints every setting `stoke train` would run with, its value and where the value\n"
           "came from: default, file (the --config file), env (the variable), flag,\n"
           "checkpoint (--resume), rule (left to the tuner or given as auto, and decided by\n"
           "a rule from the machine and the data: nothing measured), measured (given as auto\n"
           "and measured by trials) or cached (given as auto and measured by an earlier run's\n"
           "trials on this machine, model and data: `stoke tune`); a decided value shows its\n"
           "reason. The configuration is resolved as train resolves it\n"
           "(defaults < --config file < environment < flags) and the tuner decides on the\n"
           "machine and the dataset, as `stoke train --dry-run` does; nothing is trained.\n\n");
    cli_print_options(show_opts, 24);
    printf("\n"
           "The options are train's (`stoke train --help`). Exit status: 0 shown, 1 a\n"
           "setting that cannot run (a missing dataset, a bad model file), 2 usage (an\n"
           "unknown option, a bad value).\n");
}

/* A value decided by the tuner for one of its settings, or NULL when the setting was
 * given (then it is shown with its own source). */
typedef struct tuned {
    cJSON *value;
    const stoke_why *why;
} tuned;

/* Decided by a rule or measured (now or by an earlier run: cached). */
static bool is_tuned(const stoke_why *w) { return stoke_source_decided(w->source); }

static tuned tuned_value(const char *key, const stoke_train_config *c, const stoke_decision *d)
{
    tuned r = {0};
    char dev[16];
    if (!strcmp(key, "device") && d->device_why.source == STOKE_SRC_RULE) {
        if (d->device == STOKE_TUNE_CPU)
            snprintf(dev, sizeof dev, "cpu");
        else
            snprintf(dev, sizeof dev, "cuda:%d", d->device);
        r = (tuned){cJSON_CreateString(dev), &d->device_why};
    } else if (!strcmp(key, "precision") && is_tuned(&d->precision_why)) {
        r = (tuned){cJSON_CreateString(stoke_precision_name(d->precision)), &d->precision_why};
    } else if (!strcmp(key, "workers") && is_tuned(&d->workers_why)) {
        r = (tuned){cJSON_CreateNumber(d->workers), &d->workers_why};
    } else if (!strcmp(key, "threads") && is_tuned(&d->threads_why)) {
        r = (tuned){cJSON_CreateNumber(d->threads), &d->threads_why};
    } else if (!strcmp(key, "prefetch") && is_tuned(&d->prefetch_why)) {
        r = (tuned){cJSON_CreateNumber(d->prefetch), &d->prefetch_why};
    } else if (!strcmp(key, "batch_size") && is_tuned(&d->batch_why)) {
        r = (tuned){cJSON_CreateNumber((double)d->batch), &d->batch_why};
    } else if (!strcmp(key, "accumulate") && is_tuned(&d->accumulate_why)) {
        r = (tuned){cJSON_CreateNumber((double)c->accumulate), &d->accumulate_why};
    } else if (!strcmp(key, "recompute") && !strcmp(c->recompute, "auto")) {
        /* decided when the models are allocated, which show does not do */
        static const stoke_why later = {
            STOKE_SRC_RULE, "decided when the models are allocated: on only if they would not "
                            "fit without it, before a smaller batch is tried"};
        r = (tuned){cJSON_CreateString("auto"), &later};
    }
    return r;
}

/* Where a given value came from, for the user: the file, the variable, the flag. */
static void given_detail(const char *key, int i, stoke_cfg_source src, const char *config_path,
                         const char *resume, char *buf, size_t n)
{
    buf[0] = '\0';
    if (src == STOKE_CFG_FILE) {
        snprintf(buf, n, "%s", config_path ? config_path : "");
    } else if (src == STOKE_CFG_ENV) {
        const char *env = stoke_train_config_env(i);
        const char *p = stoke_env("PRECISION");
        /* the one setting two variables may set: AMP when PRECISION is not */
        if (!strcmp(key, "precision") && !(p && *p))
            env = "AMP";
        snprintf(buf, n, "%s", env ? env : "");
    } else if (src == STOKE_CFG_FLAG) {
        snprintf(buf, n, "--%s", key);
        for (char *q = buf; *q; q++)
            if (*q == '_')
                *q = '-';
    } else if (src == STOKE_CFG_CHECKPOINT) {
        snprintf(buf, n, "%s", resume);
    }
}

/* {key: {value, source, detail}} for every key, in the table's order. */
static cJSON *build(const stoke_train_config *c, const stoke_decision *d, const char *config_path)
{
    char *js = stoke_train_config_json(c);
    cJSON *values = js ? cJSON_Parse(js) : NULL;
    free(js);
    cJSON *out = cJSON_CreateObject();
    if (!values || !out) {
        cJSON_Delete(values);
        cJSON_Delete(out);
        return NULL;
    }
    for (int i = 0; stoke_train_config_key(i); i++) {
        const char *key = stoke_train_config_key(i);
        stoke_cfg_source src = c->source[i];
        char given[600];
        given_detail(key, i, src, config_path, c->resume, given, sizeof given);
        cJSON *e = cJSON_AddObjectToObject(out, key);
        tuned t = tuned_value(key, c, d);
        if (!e)
            break;
        if (t.value) {
            char detail[1200];
            /* an auto the user wrote is said so: the tuner answered their question */
            if (src != STOKE_CFG_DEFAULT)
                snprintf(detail, sizeof detail, "%s (auto from %s%s%s)", t.why->reason,
                         stoke_cfg_source_name(src), given[0] ? " " : "", given);
            else
                snprintf(detail, sizeof detail, "%s", t.why->reason);
            cJSON_AddItemToObject(e, "value", t.value);
            cJSON_AddStringToObject(e, "source", stoke_source_name(t.why->source));
            cJSON_AddStringToObject(e, "detail", detail);
        } else {
            cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(values, key);
            cJSON_AddItemToObject(e, "value", v ? v : cJSON_CreateNull());
            cJSON_AddStringToObject(e, "source", stoke_cfg_source_name(src));
            cJSON_AddStringToObject(e, "detail", given);
        }
    }
    cJSON_Delete(values);
    return out;
}

static void print_table(const cJSON *o)
{
    printf("%-16s %-28s %s\n", "setting", "value", "source");
    for (const cJSON *e = o->child; e; e = e->next) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "value");
        const char *src = cJSON_GetObjectItemCaseSensitive(e, "source")->valuestring;
        const char *detail = cJSON_GetObjectItemCaseSensitive(e, "detail")->valuestring;
        char text[600];
        if (cJSON_IsString(v))
            snprintf(text, sizeof text, "%s", v->valuestring[0] ? v->valuestring : "\"\"");
        else if (cJSON_IsBool(v))
            snprintf(text, sizeof text, "%s", cJSON_IsTrue(v) ? "true" : "false");
        else if (cJSON_IsNumber(v))
            snprintf(text, sizeof text, "%.15g", v->valuedouble);
        else
            snprintf(text, sizeof text, "-");
        printf("%-16s %-28s %s%s%s\n", e->string, text, src,
               detail[0]
                   ? (!strcmp(src, "rule") || !strcmp(src, "measured") || !strcmp(src, "cached")
                          ? ": "
                          : " ")
                   : "",
               detail);
    }
}

static int show(int argc, char **argv)
{
    bool json = false;
    stoke_train_config cfg;
    const char *config_path;
    int rc = cli_train_settings("config show", argc, argv, show_opts, &json, &cfg, &config_path,
                                cmd_config_usage);
    if (rc >= 0)
        return rc;
    stoke_train_config run = cfg;
    run.dry_run = true; /* probe, data, model and decisions; no allocation, no loaders */
    stoke_trainer *t;
    if (stoke_trainer_new(&run, NULL, NULL, &t) != STOKE_OK)
        return cli_last_error("config show");
    stoke_train_config shown = *stoke_trainer_config(t);
    shown.dry_run = cfg.dry_run; /* the user's, not show's own */
    for (int i = 0; stoke_train_config_key(i); i++)
        if (!strcmp(stoke_train_config_key(i), "dry_run"))
            shown.source[i] = cfg.source[i];
    cJSON *o = build(&shown, stoke_trainer_decision(t), config_path);
    stoke_trainer_free(t);
    if (!o)
        return cli_error("config show", "out of memory");
    if (json) {
        char *s = stoke_json_print(o, false);
        if (s)
            printf("%s\n", s);
        free(s);
        rc = s ? 0 : cli_error("config show", "out of memory");
    } else {
        print_table(o);
        rc = 0;
    }
    cJSON_Delete(o);
    return rc;
}

int cmd_config(int argc, char **argv)
{
    if (argc >= 2 && cli_is_help(argv[1])) {
        cmd_config_usage();
        return 0;
    }
    if (argc < 2) {
        fprintf(stderr, "stoke config: a subcommand is needed: show\n"
                        "usage: stoke config show [--json] [train's options]\n");
        return 2;
    }
    if (strcmp(argv[1], "show") != 0) {
        fprintf(stderr,
                "stoke config: unknown subcommand '%s' (the one there is: show)\n"
                "usage: stoke config show [--json] [train's options]\n",
                argv[1]);
        return 2;
    }
    return show(argc - 1, argv + 1);
}
