/* cmd_predict.c - `stoke predict CHECKPOINT INPUT`: the saved model's prediction for
 * each sample of a dataset or an .npy file of samples, one line each. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "stoke/train.h"

typedef struct predict_args {
    long limit;
    bool outputs;
} predict_args;

static const cli_opt predict_opts[] = {
    {.name = "limit",
     .type = CLI_LONG,
     .off = offsetof(predict_args, limit),
     .arg = "N",
     .min = 1,
     .max = 1L << 40,
     .help = "the first N samples only"},
    {.name = "outputs",
     .type = CLI_SWITCH,
     .off = offsetof(predict_args, outputs),
     .help = "add the model's raw outputs (logits) to each line"},
    {0}};

void cmd_predict_usage(void)
{
    cli_print_usage("usage: stoke predict CHECKPOINT INPUT", 21,
                    (const cli_opt *[]){predict_opts, NULL}, NULL);
    printf("\n"
           "Runs a checkpoint written by `stoke train` on INPUT: a dataset in any format\n"
           "stoke reads (the \"test\" split of an IDX directory or an image folder, else the\n"
           "image folder itself) or an .npy file of samples\n"
           "shaped like the training inputs. Prints one line per sample: its index, the\n"
           "predicted class (or value), and its label when INPUT has targets; a class is its\n"
           "index, then its name when the training data named it (image folders: the class\n"
           "folder, e.g. `3 dress`); --outputs adds\n"
           "the model's raw outputs (logits). Ends with the accuracy when labels are known.\n"
           "An actor-critic prints the most likely action and `value V` (the value head).\n\n");
    cli_print_options(predict_opts, 16);
}

/* A class as its index, then its name where the checkpoint has the data's names: the
 * index stays the first word, for scripts. */
static void print_class(const stoke_saved_model *m, int64_t c)
{
    const char *name = stoke_saved_model_class_name(m, c);
    printf("%" PRId64 "%s%s", c, name ? " " : "", name ? name : "");
}

/* An image folder without a test/ split (photos/<class>/<images>) is itself the samples;
 * other formats keep the test split's error, which is left as the last error. */
static bool open_plain_images(const char *input, stoke_dataset **d)
{
    char why[1100];
    snprintf(why, sizeof why, "%s", stoke_last_error());
    stoke_dataset_opts plain = {0};
    if (stoke_dataset_open(input, &plain, d) == STOKE_OK) {
        if (!strcmp(stoke_dataset_get_info(*d)->format, "images"))
            return true;
        stoke_dataset_close(*d);
        *d = NULL;
    }
    stoke_fail(STOKE_ERR_NOTFOUND, "%s", why);
    return false;
}

int cmd_predict(int argc, char **argv)
{
    predict_args p = {0};
    const char *pos[2] = {NULL, NULL};
    cli_group g = {predict_opts, &p};
    cli_spec spec = {.cmd = "predict",
                     .usage = cmd_predict_usage,
                     .groups = &g,
                     .ngroups = 1,
                     .pos = pos,
                     .max_pos = 2};
    int prc = cli_parse(&spec, argc, argv, 1);
    if (prc >= 0)
        return prc;
    const char *ckpt = pos[0], *input = pos[1];
    long limit = p.limit;
    bool outputs = p.outputs;
    if (!ckpt || !input)
        return cli_usage_error("predict", "give a checkpoint and an input");
    stoke_saved_model *m;
    if (stoke_saved_model_open(ckpt, 256, &m) != STOKE_OK)
        return cli_last_error("predict");
    stoke_dataset_opts o = {.split = "test"};
    stoke_dataset *d;
    if (stoke_dataset_open(input, &o, &d) != STOKE_OK && !open_plain_images(input, &d)) {
        int rc = cli_last_error("predict");
        stoke_saved_model_free(m);
        return rc;
    }
    cli_warn_skipped("predict", input, d);
    const stoke_dataset_info *in = stoke_dataset_get_info(d);
    const stoke_shape *want = stoke_saved_model_input_shape(m);
    int rc = 0;
    if (stoke_shape_elems(&in->input_shape) != stoke_shape_elems(want)) {
        char a[64], b[64];
        rc = cli_error("predict", "%s: samples of shape %s, the model takes %s", input,
                       stoke_shape_format(&in->input_shape, a, sizeof a),
                       stoke_shape_format(want, b, sizeof b));
        goto out;
    }
    int64_t n = limit > 0 && limit < in->count ? limit : in->count;
    int64_t k = stoke_saved_model_outputs(m);
    unsigned char *x = malloc((size_t)n * in->input_bytes);
    int64_t *pred = malloc((size_t)n * sizeof *pred);
    float *out = malloc((size_t)n * (size_t)k * sizeof *out);
    unsigned char *tg = in->target_bytes ? malloc(in->target_bytes) : NULL;
    if (!x || !pred || !out) {
        rc = cli_error("predict", "out of memory for %" PRId64 " samples", n);
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        if (stoke_dataset_read(d, i, x + (size_t)i * in->input_bytes, NULL) != STOKE_OK) {
            rc = cli_last_error("predict");
            goto done;
        }
    if (stoke_saved_model_predict(m, x, in->input_dtype, n, pred, out) != STOKE_OK) {
        rc = cli_last_error("predict");
        goto done;
    }
    int64_t actions = stoke_saved_model_actions(m);
    bool classes = stoke_saved_model_classes(m) > 0 || actions > 0;
    bool labels = classes && in->target_kind == STOKE_TARGET_CLASS && tg;
    int64_t right = 0;
    for (int64_t i = 0; i < n; i++) {
        printf("%" PRId64 "\t", i);
        if (classes)
            print_class(m, pred[i]);
        else
            printf("%.6g", (double)out[(size_t)i * (size_t)k]);
        if (actions > 0)
            printf("\tvalue %.6g", (double)out[(size_t)i * (size_t)k + (size_t)actions]);
        if (labels && stoke_dataset_read(d, i, x, tg) == STOKE_OK) {
            int64_t y = in->target_dtype == STOKE_U8    ? tg[0]
                        : in->target_dtype == STOKE_I64 ? *(int64_t *)(void *)tg
                        : in->target_dtype == STOKE_I32 ? *(int32_t *)(void *)tg
                                                        : -1;
            printf("\tlabel ");
            print_class(m, y);
            right += y == pred[i];
        }
        if (outputs)
            for (int64_t j = 0; j < k; j++)
                printf("%s%.6g", j ? " " : "\t", (double)out[(size_t)i * (size_t)k + (size_t)j]);
        putchar('\n');
    }
    if (labels)
        fprintf(stderr, "accuracy %.2f%% (%" PRId64 " of %" PRId64 ")\n",
                n ? 100.0 * (double)right / (double)n : 0.0, right, n);
done:
    free(x);
    free(pred);
    free(out);
    free(tg);
out:
    stoke_dataset_close(d);
    stoke_saved_model_free(m);
    return rc;
}
