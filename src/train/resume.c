/* resume.c - `--resume`: settings not given come from the checkpoint's config, so
 * `--resume F` alone continues the same run; those given are checked against it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "train/trainer.h"

/* How a setting given with --resume relates to the checkpoint. The model, the
 * optimizer (its saved state) and the seed (the sample order of the epoch being
 * resumed) are what the checkpoint holds: another value cannot apply. Settings of the
 * run's machinery apply silently. Any other that differs from the checkpoint's value
 * changes the training from here on: applied, and said. */
static const char *const resume_fixed[] = {"model", "hidden", "optimizer", "seed", NULL};
static const char *const resume_quiet[] = {
    "resume",        "dry_run",   "log",           "loader_delay_us", "checkpoint",
    "log_every",     "monitor",   "workers",       "prefetch",        "threads",
    "memory_budget", "max_steps", "eval_every",    "target_accuracy", "val_batch_size",
    "device",        "recompute", "memory_safety", "batch_pow2",      "report",
    NULL};

static bool in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k))
            return true;
    return false;
}

/* A config value as the user would write it ("cnn", "0.1", "true"); "" if absent. */
static void json_value(const cJSON *v, char *buf, size_t n)
{
    if (cJSON_IsString(v))
        snprintf(buf, n, "%s", v->valuestring);
    else if (cJSON_IsBool(v))
        snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v)) /* the shortest form that reads back the same: 0.1 */
        for (int p = 6; p <= 17; p++) {
            snprintf(buf, n, "%.*g", p, v->valuedouble);
            if (strtod(buf, NULL) == v->valuedouble)
                break;
        }
    else
        buf[0] = '\0';
}

/* "--batch-size 64", "batch_size: 64 (config file)", "batch_size 64 (environment)" */
static void given_as(const char *k, stoke_cfg_source src, const char *v, char *buf, size_t n)
{
    if (src == STOKE_CFG_FLAG) {
        char flag[64];
        snprintf(flag, sizeof flag, "%s", k);
        for (char *p = flag; *p; p++)
            if (*p == '_')
                *p = '-';
        snprintf(buf, n, "--%s %s", flag, v[0] ? v : "''");
    } else {
        snprintf(buf, n, "%s %s (%s)", k, v[0] ? v : "''",
                 src == STOKE_CFG_FILE ? "config file" : "environment");
    }
}

/* Settings the user did not give come from the checkpoint's config, so `--resume F`
 * alone continues the same run; those given are checked against it (above). */
stoke_status train_resume_config(stoke_trainer *t, const stoke_ckpt *ck)
{
    stoke_train_config *c = &t->cfg;
    cJSON *o;
    stoke_status cs = train_ckpt_config(ck, &o);
    if (cs != STOKE_OK)
        return cs;
    char *mine_js = stoke_train_config_json(c);
    cJSON *mine = mine_js ? cJSON_Parse(mine_js) : NULL;
    free(mine_js);
    if (!mine) {
        cJSON_Delete(o);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    stoke_status s = STOKE_OK;
    char absent[1200] = "";
    int ckpt_key = 0;
    for (int i = 0; stoke_train_config_key(i) && s == STOKE_OK; i++) {
        const char *k = stoke_train_config_key(i);
        if (!strcmp(k, "checkpoint"))
            ckpt_key = i;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        char buf[600], given[700];
        json_value(v, buf, sizeof buf);
        /* a path that is not UTF-8: the exact bytes, not the JSON's U+FFFD */
        if (cJSON_IsString(v) && train_ckpt_config_bytes(ck, k, buf, sizeof buf) < 0) {
            s = STOKE_ERR_FORMAT;
            break;
        }
        if (c->source[i] != STOKE_CFG_DEFAULT) {
            const cJSON *u = cJSON_GetObjectItemCaseSensitive(mine, k);
            if (!v || in_list(resume_quiet, k) || cJSON_Compare(u, v, true))
                continue;
            char uv[600];
            json_value(u, uv, sizeof uv);
            if (!strcmp(k, "batch_size") && c->batch_size == 0)
                snprintf(uv, sizeof uv, "auto"); /* the batch finder decides it next */
            given_as(k, c->source[i], uv, given, sizeof given);
            if (in_list(resume_fixed, k))
                s = stoke_fail(STOKE_ERR_ARG,
                               "%s: %s contradicts the checkpoint, which was "
                               "trained with %s %s: a resumed run continues the checkpoint's "
                               "model, optimizer state and sample order (drop it, or start a "
                               "new run without --resume)",
                               stoke_ckpt_path(ck), given, k, buf[0] ? buf : "unset");
            else
                train_info(t, "resume: %s replaces the checkpoint's %s %s", given, k,
                           buf[0] ? buf : "unset");
            continue;
        }
        if (!strcmp(k, "resume") || !strcmp(k, "dry_run") || !strcmp(k, "log") ||
            !strcmp(k, "report"))
            continue;
        if (!v) { /* not a key train_ckpt_config requires: a setting newer than the file */
            char dv[600];
            json_value(cJSON_GetObjectItemCaseSensitive(mine, k), dv, sizeof dv);
            stoke_more(absent, sizeof absent, "%s%s %s", absent[0] ? ", " : "", k,
                       dv[0] ? dv : "''");
            continue;
        }
        if (stoke_train_config_set(c, k, buf, STOKE_CFG_CHECKPOINT) != STOKE_OK)
            s = train_wrap_error(STOKE_ERR_FORMAT, "%s", stoke_ckpt_path(ck));
    }
    if (s == STOKE_OK && c->checkpoint[0] && c->source[ckpt_key] == STOKE_CFG_CHECKPOINT)
        train_info(t,
                   "resume: checkpoints go to %s, the path in %s's config (--checkpoint "
                   "writes elsewhere)",
                   c->checkpoint, stoke_ckpt_path(ck));
    if (s == STOKE_OK && absent[0])
        train_info(t,
                   "resume: the checkpoint's config lacks settings newer than it; the "
                   "defaults apply: %s",
                   absent);
    cJSON_Delete(mine);
    cJSON_Delete(o);
    return s;
}
