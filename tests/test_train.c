/* test_train.c - the training loop on a small generated dataset: configuration
 * precedence, training that learns, checkpoint round trip through eval, resume
 * equivalence (mid-epoch, with accumulation, augmentation and dropout: bit-identical
 * weights), stopping on a flag (what SIGINT sets) with a checkpoint, evaluations every
 * N steps (same weights) and stopping at a target accuracy, and bf16 against fp32. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "check.h"
#include "stoke/train.h"
#include "train/trainer.h"

static char dir[256];
static char x_path[512], model_path[512], dropout_path[512], dropout0_path[512];

static const char *path_in(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* NPY v1 with a header padded to 64 bytes, as numpy writes it. */
static void write_npy(const char *path, const char *descr, const char *shape, const void *data,
                      size_t bytes)
{
    char h[128];
    int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
                     shape);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned short hl = (unsigned short)(n + pad + 1);
    fputc(hl & 0xff, f);
    fputc(hl >> 8, f);
    fwrite(h, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    fwrite(data, 1, bytes, f);
    fclose(f);
}

enum { N = 320, S = 8, K = 3 };

/* 8x8 images whose class is which third of the image is brightest, with noise: a
 * small CNN learns it in a few epochs. */
static void make_dataset(void)
{
    static unsigned char x[N * S * S], y[N];
    unsigned s = 12345;
    for (int i = 0; i < N; i++) {
        int c = i % K;
        y[i] = (unsigned char)c;
        for (int p = 0; p < S * S; p++) {
            s = s * 1103515245u + 12345u;
            int col = p % S;
            int bright = col * K / S == c ? 140 : 40;
            x[i * S * S + p] = (unsigned char)(bright + (int)((s >> 16) % 90));
        }
    }
    snprintf(x_path, sizeof x_path, "%s/x.npy", dir);
    write_npy(x_path, "|u1", "(320, 8, 8)", x, sizeof x);
    write_npy(path_in("y.npy"), "|u1", "(320,)", y, sizeof y);
    snprintf(model_path, sizeof model_path, "%s/model.yaml", dir);
    FILE *f = fopen(model_path, "w");
    fputs("layers:\n"
          "  - {type: conv2d, out: 4, kernel: 3, padding: 1}\n"
          "  - {type: batchnorm}\n"
          "  - {type: relu}\n"
          "  - {type: maxpool2d, kernel: 2}\n"
          "  - {type: flatten}\n"
          "  - {type: linear, out: 16}\n"
          "  - {type: relu}\n"
          "  - {type: linear}\n",
          f);
    fclose(f);
    /* The same with dropout after the flatten and the hidden layer; and with p = 0
     * (the identity), to show the dropout changes the training it resumes. */
    for (int k = 0; k < 2; k++) {
        char *path = k ? dropout0_path : dropout_path;
        snprintf(path, sizeof dropout_path, "%s/%s", dir, k ? "dropout0.yaml" : "dropout.yaml");
        f = fopen(path, "w");
        fprintf(f,
                "layers:\n"
                "  - {type: conv2d, out: 4, kernel: 3, padding: 1}\n"
                "  - {type: batchnorm}\n"
                "  - {type: relu}\n"
                "  - {type: maxpool2d, kernel: 2}\n"
                "  - {type: flatten}\n"
                "  - {type: dropout, p: %s}\n"
                "  - {type: linear, out: 16}\n"
                "  - {type: relu}\n"
                "  - {type: dropout, p: %s}\n"
                "  - {type: linear}\n",
                k ? "0" : "0.3", k ? "0" : "0.2");
        fclose(f);
    }
}

static void base_config(stoke_train_config *c)
{
    stoke_train_config_defaults(c);
    snprintf(c->dataset, sizeof c->dataset, "%s", x_path);
    snprintf(c->val_dataset, sizeof c->val_dataset, "%s", x_path);
    snprintf(c->model, sizeof c->model, "%s", model_path);
    c->batch_size = 32;
    c->val_batch_size = 64;
    c->accumulate = 2;
    c->epochs = 2;
    c->lr = 0.05;
    c->augment = true;
    c->threads = 2;
    c->workers = 1;
    c->seed = 7;
    c->monitor = false;
    snprintf(c->schedule, sizeof c->schedule, "cosine");
    c->warmup_steps = 2;
}

static stoke_trainer *train(const stoke_train_config *c, stoke_train_result *r)
{
    stoke_trainer *t = NULL;
    stoke_status s = stoke_trainer_new(c, NULL, NULL, &t);
    CHECK_MSG(s == STOKE_OK, "%s", stoke_last_error());
    if (s != STOKE_OK)
        return NULL;
    s = stoke_trainer_run(t, NULL);
    CHECK_MSG(s == STOKE_OK, "%s", stoke_last_error());
    stoke_trainer_result(t, r);
    return t;
}

/* Bytes of every parameter and buffer equal. */
static bool same_weights(stoke_trainer *a, stoke_trainer *b, bool verbose)
{
    stoke_model *ma = stoke_trainer_model(a), *mb = stoke_trainer_model(b);
    const stoke_graph *g = stoke_model_graph(ma);
    bool same = true;
    for (int i = 0; i < stoke_graph_param_count(g); i++) {
        const stoke_param_info *p = stoke_graph_param(g, i);
        if (memcmp(stoke_model_param(ma, i), stoke_model_param(mb, i),
                   (size_t)p->elems * sizeof(float)) != 0) {
            if (verbose)
                fprintf(stderr, "parameter %s differs\n", p->name);
            same = false;
        }
    }
    return same;
}

static const char *fake_env(const char *name)
{
    if (!strcmp(name, "BATCH_SIZE"))
        return "32";
    if (!strcmp(name, "NUM_WORKERS"))
        return "3";
    if (!strcmp(name, "AMP"))
        return "true";
    return NULL;
}

static const char *bad_env(const char *name) { return !strcmp(name, "BATCH_SIZE") ? "lots" : NULL; }

static void test_config(void)
{
    stoke_train_config c;
    stoke_train_config_defaults(&c);
    CHECK_INT_EQ(c.batch_size, 128);
    CHECK_INT_EQ(stoke_train_config_source(&c, "batch_size"), STOKE_CFG_DEFAULT);
    FILE *f = fopen(path_in("cfg.yaml"), "w");
    fputs("batch_size: 64\nepochs: 5\nnum-workers-typo-free: 1\n", f);
    fclose(f);
    /* An unknown key in the file is an error naming the line. */
    CHECK_INT_EQ(stoke_train_config_load_file(&c, path_in("cfg.yaml")), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "cfg.yaml:3:1");
    CHECK_STR_CONTAINS(stoke_last_error(), "num-workers-typo-free");
    f = fopen(path_in("cfg.yaml"), "w");
    fputs("batch_size: 64\nepochs: 5\nlr: 0.1\nval-batch-size: 500\n", f);
    fclose(f);
    stoke_train_config_defaults(&c);
    CHECK_INT_EQ(stoke_train_config_load_file(&c, path_in("cfg.yaml")), STOKE_OK);
    CHECK_INT_EQ(stoke_train_config_load_env(&c, fake_env), STOKE_OK);
    CHECK_INT_EQ(stoke_train_config_set(&c, "batch-size", "16", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(stoke_train_config_set(&c, "lr", "0.2", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(c.batch_size, 16); /* flag > env > file */
    CHECK_INT_EQ(stoke_train_config_source(&c, "batch_size"), STOKE_CFG_FLAG);
    CHECK_INT_EQ(c.epochs, 5); /* file > default */
    CHECK_INT_EQ(stoke_train_config_source(&c, "epochs"), STOKE_CFG_FILE);
    CHECK_INT_EQ(c.val_batch_size, 500);
    CHECK_INT_EQ(c.workers, 3); /* env > default */
    CHECK_INT_EQ(stoke_train_config_source(&c, "workers"), STOKE_CFG_ENV);
    CHECK_STR_EQ(c.precision, "bf16"); /* AMP=true */
    CHECK_NEAR(c.lr, 0.2, 0);
    /* Without the flag, env beats the file. */
    stoke_train_config_defaults(&c);
    stoke_train_config_load_file(&c, path_in("cfg.yaml"));
    stoke_train_config_load_env(&c, fake_env);
    CHECK_INT_EQ(c.batch_size, 32);
    CHECK_INT_EQ(stoke_train_config_source(&c, "batch_size"), STOKE_CFG_ENV);

    CHECK_INT_EQ(stoke_train_config_load_env(&c, bad_env), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "BATCH_SIZE=lots");
    CHECK_INT_EQ(stoke_train_config_set(&c, "precision", "fp8", STOKE_CFG_FLAG), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "precision");
    CHECK_INT_EQ(stoke_train_config_set(&c, "batch_size", "0", STOKE_CFG_FLAG), STOKE_ERR_ARG);
    CHECK_INT_EQ(stoke_train_config_set(&c, "batch_size", "1.5", STOKE_CFG_FLAG), STOKE_ERR_ARG);
    CHECK_INT_EQ(stoke_train_config_set(&c, "no_such_key", "1", STOKE_CFG_FLAG), STOKE_ERR_ARG);
    CHECK_INT_EQ(stoke_train_config_set(&c, "memory_budget", "512M", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_NEAR(c.memory_budget, 512e6, 0);
    char *js = stoke_train_config_json(&c);
    CHECK(js && strstr(js, "\"batch_size\":32"));
    free(js);

    /* target_accuracy: a fraction in (0, 1] or a percentage; 0 is off; a bare number
     * above 1 is refused, not read as a percentage. */
    static const struct {
        const char *v;
        double want;
    } fractions[] = {{"0.9", 0.9}, {"90%", 0.9}, {"100%", 1},     {"1", 1},
                     {"0", 0},     {"0%", 0},    {"87.5%", 0.875}};
    for (size_t i = 0; i < sizeof fractions / sizeof fractions[0]; i++) {
        CHECK_INT_EQ(stoke_train_config_set(&c, "target-accuracy", fractions[i].v, STOKE_CFG_FLAG),
                     STOKE_OK);
        CHECK_NEAR(c.target_accuracy, fractions[i].want, 1e-12);
    }
    static const char *bad_fractions[] = {"90", "1.01", "101%", "-0.1", "-5%", "",
                                          "%",  "abc",  "0.9x", "90%%", "nan", "inf"};
    for (size_t i = 0; i < sizeof bad_fractions / sizeof bad_fractions[0]; i++) {
        CHECK_MSG(stoke_train_config_set(&c, "target_accuracy", bad_fractions[i], STOKE_CFG_FLAG) ==
                      STOKE_ERR_ARG,
                  "target_accuracy '%s' accepted", bad_fractions[i]);
        CHECK_STR_CONTAINS(stoke_last_error(), "target_accuracy");
    }
    CHECK_NEAR(c.target_accuracy, 0.875, 1e-12); /* a refused value changes nothing */
    /* hidden: 1 to 16 sizes in [1, 2^20] */
    static const struct {
        const char *v, *want;
    } sizes[] = {
        {"512,512", "512,512"},
        {"64", "64"},
        {"64 , 32", "64 , 32"},
        {"  ", ""},
        {"", ""},
        {"1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"},
        {"1048576", "1048576"}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        CHECK_INT_EQ(stoke_train_config_set(&c, "hidden", sizes[i].v, STOKE_CFG_FLAG), STOKE_OK);
        CHECK_STR_EQ(c.hidden, sizes[i].want);
    }
    static const char *bad_sizes[] = {"512,,512",
                                      "512,",
                                      ",512",
                                      "0",
                                      "-4",
                                      "1048577",
                                      "wide",
                                      "64;32",
                                      "1.5",
                                      "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17",
                                      "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        CHECK_MSG(stoke_train_config_set(&c, "hidden", bad_sizes[i], STOKE_CFG_FLAG) ==
                      STOKE_ERR_ARG,
                  "hidden '%s' accepted", bad_sizes[i]);
        CHECK_STR_CONTAINS(stoke_last_error(), "hidden");
    }
    CHECK_INT_EQ(stoke_train_config_set(&c, "eval-every", "25", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(c.eval_every, 25);
    CHECK_INT_EQ(stoke_train_config_set(&c, "eval_every", "-1", STOKE_CFG_FLAG), STOKE_ERR_ARG);
    /* In a config file too, and in the JSON a checkpoint keeps. */
    f = fopen(path_in("cfg.yaml"), "w");
    fputs("target_accuracy: 88%\nhidden: 256,128\neval_every: 50\n", f);
    fclose(f);
    stoke_train_config_defaults(&c);
    CHECK_INT_EQ(stoke_train_config_load_file(&c, path_in("cfg.yaml")), STOKE_OK);
    CHECK_NEAR(c.target_accuracy, 0.88, 1e-12);
    CHECK_STR_EQ(c.hidden, "256,128");
    CHECK_INT_EQ(c.eval_every, 50);
    js = stoke_train_config_json(&c);
    CHECK(js && strstr(js, "\"hidden\":\"256,128\"") && strstr(js, "\"target_accuracy\":0.88") &&
          strstr(js, "\"eval_every\":50"));
    free(js);
    f = fopen(path_in("cfg.yaml"), "w");
    fputs("epochs: 2\ntarget_accuracy: 95\n", f);
    fclose(f);
    CHECK_INT_EQ(stoke_train_config_load_file(&c, path_in("cfg.yaml")), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "cfg.yaml:2:18: target_accuracy: '95'");
    /* the same parser from memory (what the fuzz target drives) */
    static const char text[] = "epochs: 7\nhidden: 64,32\nlr: fast\n";
    stoke_train_config_defaults(&c);
    CHECK_INT_EQ(stoke_train_config_parse(&c, text, strlen(text), "mem.yaml"), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "mem.yaml:3:5: lr");
    CHECK_INT_EQ(c.epochs, 7);
    CHECK_INT_EQ(stoke_train_config_parse(&c, text, 10, "mem.yaml"), STOKE_OK);
}

/* The seeds' variables (issue 13): every key's own, and "auto" from each source. */
static const char *seed_env(const char *name)
{
    static const char *const kv[][2] = {
        {"BATCH_SIZE", "48"},     {"VAL_BATCH_SIZE", "96"}, {"NUM_WORKERS", "auto"},
        {"PREFETCH_FACTOR", "6"}, {"ACCUMULATE", "4"},      {"PRECISION", "fp16"},
        {"EPOCHS", "7"},          {"LR", "0.125"},          {"SEED", "99"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (!strcmp(name, kv[i][0]))
            return kv[i][1];
    return NULL;
}

static const char *env_amp_and_precision(const char *name)
{
    return !strcmp(name, "AMP") ? "true" : !strcmp(name, "PRECISION") ? "fp32" : NULL;
}

static const char *env_bad_prefetch(const char *name)
{
    return !strcmp(name, "PREFETCH_FACTOR") ? "-3" : NULL;
}

static void test_config_env_auto(void)
{
    stoke_train_config c;
    stoke_train_config_defaults(&c);
    CHECK_INT_EQ(stoke_train_config_load_env(&c, seed_env), STOKE_OK);
    CHECK_INT_EQ(c.batch_size, 48);
    CHECK_INT_EQ(c.val_batch_size, 96);
    CHECK_INT_EQ(c.workers, -1); /* auto: decided */
    CHECK_INT_EQ(c.prefetch, 6);
    CHECK_INT_EQ(c.accumulate, 4);
    CHECK_STR_EQ(c.precision, "fp16");
    CHECK_INT_EQ(c.epochs, 7);
    CHECK_NEAR(c.lr, 0.125, 0);
    CHECK(c.seed == 99);
    static const char *const from_env[] = {"batch_size", "val_batch_size", "workers", "prefetch",
                                           "accumulate", "precision",      "epochs",  "lr",
                                           "seed"};
    for (size_t i = 0; i < sizeof from_env / sizeof from_env[0]; i++)
        CHECK_MSG(stoke_train_config_source(&c, from_env[i]) == STOKE_CFG_ENV, "%s not from env",
                  from_env[i]);
    /* every key's variable as the table names it */
    int found = 0;
    for (int i = 0; stoke_train_config_key(i); i++) {
        const char *env = stoke_train_config_env(i);
        if (env && seed_env(env))
            found++;
    }
    CHECK_INT_EQ(found, 9);
    CHECK_INT_EQ(stoke_train_config_load_env(&c, env_amp_and_precision), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "AMP=true and PRECISION=fp32");
    CHECK_INT_EQ(stoke_train_config_load_env(&c, env_bad_prefetch), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "PREFETCH_FACTOR=-3: prefetch");

    /* auto stores the tuner's "decide" value, from a flag as from a file */
    stoke_train_config_defaults(&c);
    CHECK_INT_EQ(stoke_train_config_set(&c, "workers", "4", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(stoke_train_config_set(&c, "prefetch", "8", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(stoke_train_config_set(&c, "threads", "3", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(stoke_train_config_set(&c, "workers", "auto", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(stoke_train_config_set(&c, "prefetch", "AUTO", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(stoke_train_config_set(&c, "threads", "auto", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(c.workers, -1);
    CHECK_INT_EQ(c.prefetch, 0);
    CHECK_INT_EQ(c.threads, 0);
    CHECK_INT_EQ(stoke_train_config_source(&c, "workers"), STOKE_CFG_FLAG);
    static const char text[] = "precision: auto\ndevice: auto\nrecompute: auto\nworkers: auto\n";
    CHECK_INT_EQ(stoke_train_config_parse(&c, text, strlen(text), "auto.yaml"), STOKE_OK);
    CHECK_STR_EQ(c.recompute, "auto");
    CHECK_INT_EQ(stoke_train_config_source(&c, "workers"), STOKE_CFG_FILE);
    /* the batch finder's auto (test_batch_fit) is 0 until the trainer decides it */
    CHECK_INT_EQ(stoke_train_config_set(&c, "batch_size", "auto", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(c.batch_size, 0);
    CHECK_INT_EQ(stoke_train_config_set(&c, "epochs", "auto", STOKE_CFG_FLAG), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "epochs: 'auto' is for the settings the tuner decides");
}

/* The config reader on `text`: refused with `want` in the message (issue 9: duplicate
 * keys (8), values of the wrong shape (10), nesting (1)). */
static void config_bad(const char *text, const char *want)
{
    stoke_train_config c;
    stoke_train_config_defaults(&c);
    CHECK_MSG(stoke_train_config_parse(&c, text, strlen(text), "cfg.yaml") == STOKE_ERR_FORMAT,
              "accepted: %.200s", text);
    CHECK_STR_CONTAINS(stoke_last_error(), want);
}

static void test_config_shapes(void)
{
    /* (10): the file, the value's own line and column, the key, what was expected */
    config_bad("epochs: 2\nbatch_size: {a: 1}\n",
               "cfg.yaml:2:13: batch_size: expected a single value (a scalar), got a mapping");
    config_bad("batch_size: [64]\n", "cfg.yaml:1:13: batch_size: expected a single value "
                                     "(a scalar), got a list");
    config_bad("epochs: 2\nlog:\n", "cfg.yaml:2:5: log: expected a value, got nothing (null)");
    config_bad("checkpoint: ~\n", "cfg.yaml:1:13: checkpoint: expected a value, got nothing");
    config_bad("epochs: 2\n[a, b]: 1\n", "cfg.yaml:2:1: settings are plain key: value pairs; "
                                         "this key is a list");
    config_bad("? {a: 1}\n: 2\n", "cfg.yaml:1:3: settings are plain key: value pairs; this key "
                                  "is a mapping");
    config_bad("epochs: &e 2\nmax_steps: *e\n", "cfg.yaml:2:12: max_steps: aliases (*e) are not "
                                                "supported");
    config_bad("epochs: !!int 2\n", "cfg.yaml:1:9: epochs: tags (!!int) are not supported");
    config_bad("epochs: 2\n---\nepochs: 3\n", "cfg.yaml:2:1: a second document (---)");
    /* a bad value at its own position, an unknown key at the key's */
    config_bad("epochs: 2\nbatch_size: \"\"\n", "cfg.yaml:2:13: batch_size: '' is not a whole");
    config_bad("epochs: 2\n  # c\nbatch_sise: 3\n", "cfg.yaml:3:1: unknown setting 'batch_sise'");
    /* (8): a key given twice, also as batch-size against batch_size (one setting) */
    config_bad("batch_size: 64\nepochs: 2\nbatch_size: 32\n",
               "cfg.yaml:3:1: batch_size: key given twice (first at line 1)");
    config_bad("batch_size: 64\nbatch-size: 32\n",
               "cfg.yaml:2:1: batch-size: key given twice (first at line 1 as 'batch_size')");
    config_bad("lr: 0.1\nepochs: {a: 1, a: 2}\n", "cfg.yaml:2:16: epochs.a: key given twice");
    /* (1): depth is refused before libyaml reads the rest */
    size_t n = 1000000;
    char *deep = malloc(n + 8);
    if (deep) {
        memcpy(deep, "lr: ", 4);
        memset(deep + 4, '[', n);
        stoke_train_config c;
        stoke_train_config_defaults(&c);
        CHECK(stoke_train_config_parse(&c, deep, n + 4, "cfg.yaml") == STOKE_ERR_FORMAT);
        CHECK_STR_CONTAINS(stoke_last_error(), "cfg.yaml:1:260: lr[0][0]");
        CHECK_STR_CONTAINS(stoke_last_error(), "lists and mappings nested deeper than 256 levels");
        free(deep);
    }
    /* the same checks from a file, and a file that is fine still loads */
    FILE *f = fopen(path_in("cfg.yaml"), "w");
    fputs("batch_size: 64\nepochs: 2\nbatch_size: 32\n", f);
    fclose(f);
    stoke_train_config c;
    stoke_train_config_defaults(&c);
    CHECK_INT_EQ(stoke_train_config_load_file(&c, path_in("cfg.yaml")), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "cfg.yaml:3:1: batch_size: key given twice");
    f = fopen(path_in("cfg.yaml"), "w");
    fputs("# a comment\n---\nbatch_size: \"64\"\nlog: ''\n...\n", f);
    fclose(f);
    CHECK_INT_EQ(stoke_train_config_load_file(&c, path_in("cfg.yaml")), STOKE_OK);
    CHECK_INT_EQ(c.batch_size, 64);
    CHECK_INT_EQ(stoke_train_config_load_file(&c, path_in("none.yaml")), STOKE_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(stoke_last_error(), "none.yaml");
    CHECK_INT_EQ(stoke_train_config_parse(&c, "", 0, "empty.yaml"), STOKE_OK);
}

static void test_learns_and_eval(void)
{
    stoke_train_config c;
    base_config(&c);
    c.epochs = 5;
    c.accumulate = 1;
    c.augment = false; /* a flip would swap the left and right classes */
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", path_in("learn.safetensors"));
    stoke_train_result r;
    stoke_trainer *t = train(&c, &r);
    if (!t)
        return;
    CHECK_INT_EQ(r.epochs_done, 5);
    CHECK(!r.interrupted);
    CHECK_STR_EQ(r.metric_name, "acc");
    /* The task is easy: far above the 1/3 of guessing. */
    CHECK_MSG(r.val_metric > 0.8, "val accuracy %g", r.val_metric);
    stoke_trainer_free(t);
    /* eval on the checkpoint reproduces the trainer's last evaluation. */
    stoke_saved_model *m;
    CHECK_INT_EQ(stoke_saved_model_open(c.checkpoint, 64, &m), STOKE_OK);
    stoke_dataset *d;
    CHECK_INT_EQ(stoke_dataset_open(x_path, NULL, &d), STOKE_OK);
    double loss, metric;
    int64_t n;
    CHECK_INT_EQ(stoke_saved_model_eval(m, d, 0, &loss, &metric, &n), STOKE_OK);
    CHECK_INT_EQ(n, N);
    CHECK_NEAR(metric, r.val_metric, 1e-9);
    /* (batches of 64 here, the trainer's own size there: bf16 matmuls may pick other
     * kernels, so an absolute floor for a loss near zero) */
    CHECK_NEAR(loss, r.val_loss, 1e-5 * fabs(r.val_loss) + 1e-6);
    stoke_dataset_close(d);
    stoke_saved_model_free(m);
}

/* Trains `model` uninterrupted; then the same stopped at step 3 (mid-epoch, as
 * --max-steps 3 --checkpoint does) and resumed with only --resume given: the final
 * weights must be bit-identical. Returns the uninterrupted run (the caller frees it). */
static stoke_trainer *check_resume(const char *model, const char *what)
{
    stoke_train_config c;
    base_config(&c);
    snprintf(c.model, sizeof c.model, "%s", model);
    stoke_train_result ra, rb;
    stoke_trainer *a = train(&c, &ra);
    /* 320 samples / (32 x 2) = 5 steps an epoch: stop at step 3, mid-epoch. */
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", path_in("half.safetensors"));
    c.max_steps = 3;
    stoke_trainer *b = train(&c, &rb);
    CHECK(rb.interrupted);
    CHECK_INT_EQ(rb.steps, 3);
    stoke_trainer_free(b);
    stoke_ckpt *ck;
    CHECK_INT_EQ(stoke_ckpt_open(c.checkpoint, &ck), STOKE_OK);
    CHECK_STR_EQ(stoke_ckpt_meta(ck, "stoke.step"), "3");
    CHECK_STR_EQ(stoke_ckpt_meta(ck, "stoke.sampler_epoch"), "0");
    CHECK_STR_EQ(stoke_ckpt_meta(ck, "stoke.sampler_index"), "192");
    CHECK(stoke_ckpt_find(ck, "optim.m.conv1.weight") != NULL);
    CHECK(stoke_ckpt_find(ck, "bn1.running_mean") != NULL);
    stoke_ckpt_close(ck);
    /* Resume with only --resume given: the rest comes from the checkpoint. */
    stoke_train_config r;
    stoke_train_config_defaults(&r);
    stoke_train_config_set(&r, "resume", c.checkpoint, STOKE_CFG_FLAG);
    stoke_train_config_set(&r, "monitor", "false", STOKE_CFG_FLAG);
    stoke_train_config_set(&r, "max_steps", "0", STOKE_CFG_FLAG);
    stoke_train_config_set(&r, "checkpoint", path_in("resumed.safetensors"), STOKE_CFG_FLAG);
    stoke_train_result rr;
    stoke_trainer *b2 = train(&r, &rr);
    if (a && b2) {
        CHECK_INT_EQ(rr.steps, ra.steps);
        CHECK(!rr.interrupted);
        CHECK_MSG(same_weights(a, b2, true),
                  "%s: resumed run's weights differ from the "
                  "uninterrupted run",
                  what);
        CHECK(rr.val_metric == ra.val_metric && rr.val_loss == ra.val_loss);
    }
    stoke_trainer_free(b2);
    /* A different seed must give different weights, or the comparison proves nothing. */
    c.max_steps = 0;
    c.seed = 8;
    c.checkpoint[0] = '\0';
    stoke_train_result rs;
    stoke_trainer *s = train(&c, &rs);
    if (a && s)
        CHECK(!same_weights(a, s, false));
    stoke_trainer_free(s);
    return a;
}

static void test_resume(void)
{
    stoke_trainer_free(check_resume(model_path, "cnn"));
    /* Dropout masks are keyed by (seed, layer, optimizer step, micro-batch), so a
     * resumed run drops the same units as the uninterrupted one; with 2 micro-batches
     * a step (accumulate 2), and augmentation. */
    stoke_trainer *a = check_resume(dropout_path, "cnn with dropout");
    /* The dropout matters: the same run with p = 0 ends elsewhere. */
    stoke_train_config c;
    base_config(&c);
    snprintf(c.model, sizeof c.model, "%s", dropout0_path);
    stoke_train_result r0;
    stoke_trainer *z = train(&c, &r0);
    if (a && z)
        CHECK(!same_weights(a, z, false));
    stoke_trainer_free(z);
    stoke_trainer_free(a);
}

typedef struct stopper {
    volatile int *flag;
    int progress;
} stopper;

static void stop_after_two(const stoke_train_event *e, void *ctx)
{
    stopper *st = ctx;
    if (e->kind == STOKE_EV_PROGRESS && ++st->progress == 2)
        *st->flag = 1;
}

static void test_stop_flag(void)
{
    stoke_train_config c;
    base_config(&c);
    c.accumulate = 1;
    c.epochs = 50;
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", path_in("stopped.safetensors"));
    volatile int flag = 0;
    stopper st = {&flag, 0};
    stoke_trainer *t = NULL;
    CHECK_INT_EQ(stoke_trainer_new(&c, stop_after_two, &st, &t), STOKE_OK);
    if (!t)
        return;
    CHECK_INT_EQ(stoke_trainer_run(t, &flag), STOKE_OK);
    stoke_train_result r;
    stoke_trainer_result(t, &r);
    CHECK(r.interrupted);
    CHECK(r.epochs_done < 50);
    stoke_ckpt *ck;
    CHECK_INT_EQ(stoke_ckpt_open(c.checkpoint, &ck), STOKE_OK);
    if (ck) {
        char want[32];
        snprintf(want, sizeof want, "%lld", (long long)r.steps);
        CHECK_STR_EQ(stoke_ckpt_meta(ck, "stoke.step"), want);
        stoke_ckpt_close(ck);
    }
    stoke_trainer_free(t);
}

typedef struct eval_log {
    int evals, epochs, targets;
    int64_t eval_steps[16];
} eval_log;

static void count_evals(const stoke_train_event *e, void *ctx)
{
    eval_log *l = ctx;
    if (e->kind == STOKE_EV_EVAL && l->evals < 16)
        l->eval_steps[l->evals++] = e->step;
    l->epochs += e->kind == STOKE_EV_EPOCH;
    l->targets += e->kind == STOKE_EV_TARGET;
}

static stoke_trainer *train_counting(const stoke_train_config *c, eval_log *l,
                                     stoke_train_result *r)
{
    memset(l, 0, sizeof *l);
    stoke_trainer *t = NULL;
    CHECK_INT_EQ(stoke_trainer_new(c, count_evals, l, &t), STOKE_OK);
    if (!t)
        return NULL;
    CHECK_MSG(stoke_trainer_run(t, NULL) == STOKE_OK, "%s", stoke_last_error());
    stoke_trainer_result(t, r);
    return t;
}

/* eval_every with accumulation (5 optimizer steps an epoch): evaluations within the
 * epochs only, none where a step ends an epoch, and the same weights as without them;
 * target_accuracy stops at the first evaluation reaching it. */
static void test_eval_every_and_target(void)
{
    stoke_train_config c;
    base_config(&c);
    stoke_train_result r0, r;
    eval_log l;
    stoke_trainer *plain = train_counting(&c, &l, &r0);
    CHECK_INT_EQ(l.evals, 0);
    CHECK_INT_EQ(l.epochs, 2);
    c.eval_every = 2;
    stoke_trainer *t = train_counting(&c, &l, &r);
    CHECK_INT_EQ(l.evals, 4);
    CHECK_INT_EQ(l.eval_steps[0], 2);
    CHECK_INT_EQ(l.eval_steps[1], 4);
    CHECK_INT_EQ(l.eval_steps[2], 6);
    CHECK_INT_EQ(l.eval_steps[3], 8);
    CHECK_INT_EQ(l.epochs, 2);
    CHECK_INT_EQ(r.steps, 10);
    if (plain && t)
        CHECK_MSG(same_weights(plain, t, true), "--eval-every changed the training");
    CHECK(r.val_metric == r0.val_metric && r.val_loss == r0.val_loss);
    CHECK(!r.target_reached && r.best_val_metric >= r.val_metric);
    stoke_trainer_free(t);
    stoke_trainer_free(plain);
    c.eval_every = 5; /* steps 5 and 10 end the epochs */
    t = train_counting(&c, &l, &r);
    CHECK_INT_EQ(l.evals, 0);
    CHECK_INT_EQ(l.epochs, 2);
    stoke_trainer_free(t);
    /* A target the first evaluation reaches (above zero: any correct answer). */
    c.eval_every = 2;
    c.epochs = 4;
    c.target_accuracy = 1e-6;
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", path_in("target.safetensors"));
    t = train_counting(&c, &l, &r);
    CHECK(r.target_reached && !r.interrupted);
    CHECK_INT_EQ(l.targets, 1);
    CHECK_INT_EQ(l.evals, 1);
    CHECK_INT_EQ(l.epochs, 0);
    CHECK_INT_EQ(r.steps, 2);
    CHECK_INT_EQ(r.target_step, 2);
    CHECK_INT_EQ(r.target_epoch, 0);
    CHECK(r.target_elapsed_s >= 0 && r.val_metric >= c.target_accuracy);
    stoke_trainer_free(t);
    stoke_ckpt *ck;
    CHECK_INT_EQ(stoke_ckpt_open(c.checkpoint, &ck), STOKE_OK);
    if (ck) {
        CHECK_STR_EQ(stoke_ckpt_meta(ck, "stoke.step"), "2");
        stoke_ckpt_close(ck);
    }
    /* Unreachable: all epochs run. */
    c.target_accuracy = 1;
    c.epochs = 1;
    c.checkpoint[0] = '\0';
    t = train_counting(&c, &l, &r);
    CHECK(!r.target_reached && r.epochs_done == 1 && l.targets == 0);
    stoke_trainer_free(t);
}

static void test_bf16(void)
{
    stoke_train_config c;
    base_config(&c);
    c.accumulate = 1;
    c.max_steps = 6;
    c.val_dataset[0] = '\0';
    double loss[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        snprintf(c.precision, sizeof c.precision, "%s", k ? "bf16" : "fp32");
        stoke_train_result r;
        stoke_trainer *t = train(&c, &r);
        if (!t)
            return;
        loss[k] = stoke_model_loss(stoke_trainer_model(t));
        stoke_trainer_free(t);
    }
    /* Same batches, same initial weights: after 6 steps the last batch's loss in bf16
     * (8-bit mantissas for weights and activations, fp32 accumulation) stays within
     * 0.05 of fp32's (about 1.0 here). */
    fprintf(stderr, "loss after 6 steps: fp32 %.6f, bf16 %.6f\n", loss[0], loss[1]);
    CHECK(isfinite(loss[0]) && isfinite(loss[1]));
    CHECK_NEAR(loss[1], loss[0], 0.05);
}

/* The CPU's peak: its cache (write, read, another key, corrupt files and a FIFO, all
 * measured again with a message, never a hang), the clock as the fallback, and MFU
 * never above 100% (an epoch faster than the peak raises it and drops the cache). The
 * CPU is made up, so the key and the clock's figure are the same on any machine; only
 * the measurement runs on this one, and no timing is compared. */
static void write_text(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    fwrite(text, 1, n, f);
    fclose(f);
}

static void test_peak(void)
{
    char cache[600], sub[640];
    snprintf(cache, sizeof cache, "%s/peakcache", dir);
    snprintf(sub, sizeof sub, "%s/peak", cache);
    setenv("STOKE_CACHE_DIR", cache, 1);
    stoke_cpu_info cpu = {.model = "Test CPU",
                          .vendor = "AuthenticAMD",
                          .family = 26,
                          .model_number = 2,
                          .stepping = 1,
                          .physical_cores = 2,
                          .max_mhz = 2000,
                          .simd = STOKE_SIMD_AVX2 | STOKE_SIMD_FMA};
    char key[1024], key2[1024], path[4200], when[40], why[600];
    double f = 0;
    train_peak_key(&cpu, STOKE_PREC_FP32, 2, key, sizeof key);
    train_cache_file("peak", key, "txt", path, sizeof path);
    CHECK_STR_CONTAINS(path, "/peakcache/peak/");
    CHECK(!train_peak_cache_read(path, key, &f, when, sizeof when, why, sizeof why));
    CHECK_STR_CONTAINS(why, "not measured before");

    /* measuring is impossible (a dry run) and nothing is cached: the clock's figure,
     * 2 cores x 2000 MHz x 32 (AVX2+FMA), said so */
    train_peak p;
    train_cpu_peak(&cpu, STOKE_PREC_FP32, 2, false, &p);
    CHECK_INT_EQ(p.source, TRAIN_PEAK_CLOCK);
    CHECK(p.flops == 2 * 2000e6 * 32);
    CHECK_STR_EQ(p.label, "computed from the clock");
    CHECK_STR_CONTAINS(p.how, "a dry run measures nothing");

    /* written atomically, read back; another thread count or precision is a miss */
    CHECK_INT_EQ(train_peak_cache_write(path, key, 5.21e11, "test"), STOKE_OK);
    CHECK(train_peak_cache_read(path, key, &f, when, sizeof when, why, sizeof why));
    CHECK(fabs(f - 5.21e11) < 1e6);
    CHECK(strlen(when) > 0);
    train_peak_key(&cpu, STOKE_PREC_FP32, 3, key2, sizeof key2);
    CHECK(strcmp(key, key2) != 0);
    CHECK(!train_peak_cache_read(path, key2, &f, when, sizeof when, why, sizeof why));
    CHECK_STR_CONTAINS(why, "another CPU, thread count or precision");
    train_peak_key(&cpu, STOKE_PREC_BF16, 2, key2, sizeof key2);
    CHECK(strcmp(key, key2) != 0);
    train_cpu_peak(&cpu, STOKE_PREC_FP32, 2, false, &p);
    CHECK_INT_EQ(p.source, TRAIN_PEAK_CACHED);
    CHECK(fabs(p.flops - 5.21e11) < 1e6);
    CHECK_STR_CONTAINS(p.label, "cached from ");
    CHECK_STR_CONTAINS(p.how, path);

    /* corrupt files: a clear message each, and measured again */
    char text[1200];
    snprintf(text, sizeof text, "key: %s\nflops: lots\nmeasured: 2025-01-01\n", key);
    write_text(path, text, strlen(text));
    CHECK(!train_peak_cache_read(path, key, &f, when, sizeof when, why, sizeof why));
    CHECK_STR_CONTAINS(why, "not a peak cache file (flops: 'lots' is not a positive number)");
    snprintf(text, sizeof text, "key: %s\nflops: -3\nmeasured: 2025-01-01\n", key);
    write_text(path, text, strlen(text));
    CHECK(!train_peak_cache_read(path, key, &f, when, sizeof when, why, sizeof why));
    CHECK_STR_CONTAINS(why, "is not a positive number");
    snprintf(text, sizeof text, "key: %s\nflops: 1e11\n", key); /* truncated */
    write_text(path, text, strlen(text));
    CHECK(!train_peak_cache_read(path, key, &f, when, sizeof when, why, sizeof why));
    CHECK_STR_CONTAINS(why, "not a peak cache file (no measured date)");
    write_text(path, "\x93NUMPY\0\x01garbage", 15);
    CHECK(!train_peak_cache_read(path, key, &f, when, sizeof when, why, sizeof why));
    CHECK_STR_CONTAINS(why, "not a peak cache file");
    char *big = malloc(10000);
    memset(big, 'k', 10000);
    write_text(path, big, 10000);
    free(big);
    CHECK(!train_peak_cache_read(path, key, &f, when, sizeof when, why, sizeof why));
    CHECK_STR_CONTAINS(why, "not a peak cache file (longer than one)");
    train_cpu_peak(&cpu, STOKE_PREC_FP32, 1, true, &p); /* another key: its own file */
    CHECK_INT_EQ(p.source, TRAIN_PEAK_MEASURED);
    CHECK(p.flops > 0);
    CHECK_STR_CONTAINS(p.how, "oneDNN's fp32 matmul");
    train_cpu_peak(&cpu, STOKE_PREC_FP32, 2, true, &p);
    CHECK_INT_EQ(p.source, TRAIN_PEAK_MEASURED);
    CHECK_STR_CONTAINS(p.label, "measured now");
    CHECK_STR_CONTAINS(p.how, "not a peak cache file (longer than one)");
    /* rewritten over the corrupt one, unless the measurement met busy cores */
    if (!p.busy)
        CHECK(train_peak_cache_read(path, key, &f, when, sizeof when, why, sizeof why));

    /* a FIFO is never opened (it would block), and never replaced */
    unlink(path);
    CHECK(mkfifo(path, 0644) == 0);
    CHECK(!train_peak_cache_read(path, key, &f, when, sizeof when, why, sizeof why));
    CHECK_STR_CONTAINS(why, "FIFO");
    train_cpu_peak(&cpu, STOKE_PREC_FP32, 2, true, &p);
    CHECK_INT_EQ(p.source, TRAIN_PEAK_MEASURED);
    CHECK_STR_CONTAINS(p.how, "FIFO");
    if (!p.busy)
        CHECK_STR_CONTAINS(p.how, "the cache not written: ");
    CHECK(!p.in_cache);
    stoke_trainer *ft = calloc(1, sizeof *ft);
    ft->step_flops = 1;
    ft->peak = p;
    CHECK(train_peak_mfu(ft, 2 * p.flops, 0) == 100); /* raised: the FIFO stays */
    free(ft);
    struct stat st;
    CHECK(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode));
    unlink(path);

    /* MFU: at most 100; an epoch above the peak raises it and removes the cache */
    CHECK(stoke_train_mfu_pct(50, 1e6, 1e8) == 50);
    CHECK(stoke_train_mfu_pct(300, 1e6, 1e8) == 100);
    CHECK(isnan(stoke_train_mfu_pct(50, 1e6, 0)));
    CHECK(isnan(stoke_train_mfu_pct(50, 0, 1e8)));
    CHECK_INT_EQ(train_peak_cache_write(path, key, 1e8, "test"), STOKE_OK);
    stoke_trainer *t = calloc(1, sizeof *t);
    t->step_flops = 1e6;
    t->peak.flops = 1e8;
    t->peak.source = TRAIN_PEAK_CACHED;
    t->peak.in_cache = true;
    snprintf(t->peak.cache_path, sizeof t->peak.cache_path, "%s", path);
    CHECK(train_peak_mfu(t, 50, 0) == 50);
    CHECK(train_peak_mfu(t, 300, 1) == 100);
    CHECK(t->peak.flops == 3e8);
    CHECK_INT_EQ(t->peak.source, TRAIN_PEAK_RAISED);
    CHECK_STR_EQ(t->peak.label, "raised to epoch 2's rate");
    CHECK(access(path, F_OK) != 0);
    CHECK(train_peak_mfu(t, 150, 2) == 50); /* against the raised peak */
    t->peak.flops = 0;
    CHECK(isnan(train_peak_mfu(t, 150, 3)));
    free(t);

    /* its files, then its directories */
    DIR *d = opendir(sub);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char q[1000];
        snprintf(q, sizeof q, "%s/%s", sub, e->d_name);
        if (e->d_name[0] != '.' || strlen(e->d_name) > 2)
            unlink(q);
    }
    if (d)
        closedir(d);
    CHECK(rmdir(sub) == 0);
    CHECK(rmdir(cache) == 0);
    unsetenv("STOKE_CACHE_DIR");
}

static void cleanup(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.')
            unlink(path_in(e->d_name));
    if (d)
        closedir(d);
    rmdir(dir);
}

/* Whether a run leaves precision to measurement (train_precision_open, what tune.c
 * opens): auto given, or left unset where the rule is unsure; never a checkpoint's auto
 * (a resumed run keeps its precision), never a value given. */
static void test_precision_open(void)
{
    struct {
        const char *value; /* NULL: left unset */
        stoke_cfg_source src;
        bool all, unsure, open;
    } cases[] = {
        {NULL, STOKE_CFG_DEFAULT, false, false, false}, /* the rule is sure: taken */
        {NULL, STOKE_CFG_DEFAULT, false, true, true},   /* unsure: measured */
        {NULL, STOKE_CFG_DEFAULT, true, false, true},   /* stoke tune measures it all */
        {"auto", STOKE_CFG_FLAG, false, false, true},   /* auto asked for */
        {"auto", STOKE_CFG_ENV, false, true, true},
        {"auto", STOKE_CFG_CHECKPOINT, false, true, false}, /* a resume keeps it */
        {"fp32", STOKE_CFG_CHECKPOINT, false, true, false},
        {"bf16", STOKE_CFG_CHECKPOINT, false, true, false},
        {"fp32", STOKE_CFG_FLAG, false, true, false}, /* given: the user's */
        {"bf16", STOKE_CFG_FILE, true, true, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        stoke_train_config c;
        stoke_train_config_defaults(&c);
        if (cases[i].value)
            CHECK_INT_EQ(stoke_train_config_set(&c, "precision", cases[i].value, cases[i].src),
                         STOKE_OK);
        CHECK_MSG(train_precision_open(&c, cases[i].all, cases[i].unsure) == cases[i].open,
                  "case %zu: precision %s (%d), all %d, unsure %d: expected open %d", i,
                  c.precision, (int)cases[i].src, cases[i].all, cases[i].unsure, cases[i].open);
    }
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/stoke-train-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    make_dataset();
    test_peak();
    test_config();
    test_config_env_auto();
    test_precision_open();
    test_config_shapes();
    test_learns_and_eval();
    test_resume();
    test_stop_flag();
    test_eval_every_and_target();
    test_bf16();
    cleanup();
    return CHECK_DONE();
}
