/* cmd_eval.c - `stoke eval CHECKPOINT`: the saved model's loss and accuracy (or MAE) on
 * a dataset, by default the test split of the dataset it was trained on. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "stoke/train.h"

typedef struct eval_args {
    const char *dataset, *split;
    long limit, batch;
} eval_args;

#define E(f) offsetof(eval_args, f)
static const cli_opt eval_opts[] = {
    {.name = "dataset",
     .type = CLI_TEXT,
     .off = E(dataset),
     .arg = "PATH",
     .help = "the data (default: the dataset the checkpoint was trained on)"},
    {.name = "split",
     .type = CLI_TEXT,
     .off = E(split),
     .arg = "NAME",
     .help = "IDX directories and image folders: the split (default test)"},
    {.name = "limit",
     .type = CLI_LONG,
     .off = E(limit),
     .arg = "N",
     .min = 1,
     .max = 1L << 40,
     .help = "evaluate the first N samples only"},
    {.name = "batch-size",
     .type = CLI_LONG,
     .off = E(batch),
     .arg = "N",
     .min = 1,
     .max = STOKE_MAX_BATCH,
     .help = "samples per forward pass (default 1000)"},
    {0}};
#undef E

void cmd_eval_usage(void)
{
    cli_print_usage("usage: stoke eval CHECKPOINT", 18, (const cli_opt *[]){eval_opts, NULL}, NULL);
    printf("\n"
           "Evaluates a checkpoint written by `stoke train` on a dataset: the one it was\n"
           "trained on (its \"test\" split, for IDX directories) unless --dataset is given.\n"
           "Prints the mean loss and the accuracy (classes) or MAE (regression).\n\n");
    cli_print_options(eval_opts, 18);
}

int cmd_eval(int argc, char **argv)
{
    eval_args e = {.batch = 1000};
    const char *ckpt = NULL;
    cli_group g = {eval_opts, &e};
    cli_spec spec = {.cmd = "eval",
                     .usage = cmd_eval_usage,
                     .groups = &g,
                     .ngroups = 1,
                     .pos = &ckpt,
                     .max_pos = 1};
    int prc = cli_parse(&spec, argc, argv, 1);
    if (prc >= 0)
        return prc;
    /* the options given, checked against the format */
    stoke_dataset_opts given = {.split = e.split};
    const char *dataset = e.dataset, *split = e.split ? e.split : "test";
    long limit = e.limit, batch = e.batch;
    if (!ckpt)
        return cli_usage_error("eval", "give a checkpoint file");
    stoke_saved_model *m;
    if (stoke_saved_model_open(ckpt, batch, &m) != STOKE_OK)
        return cli_last_error("eval");
    if (!dataset)
        dataset = stoke_saved_model_dataset(m);
    stoke_dataset_opts o = {.split = split};
    stoke_dataset *d;
    if (stoke_dataset_open(dataset, &o, &d) != STOKE_OK) {
        int rc = cli_last_error("eval");
        stoke_saved_model_free(m);
        return rc;
    }
    cli_warn_skipped("eval", dataset, d);
    int orc = cli_check_dataset_options("eval", dataset, d, &given);
    if (orc >= 0) {
        stoke_dataset_close(d);
        stoke_saved_model_free(m);
        return orc;
    }
    double loss, metric;
    int64_t n;
    stoke_status s = stoke_saved_model_eval(m, d, limit, &loss, &metric, &n);
    int rc = 0;
    if (s != STOKE_OK) {
        /* the dataset's own errors (a read, a label, its shape) name it already */
        rc = cli_error("eval", "%s", stoke_last_error());
    } else if (stoke_saved_model_classes(m) > 0) {
        printf("%s on %s (%s, %" PRId64 " samples): loss %.4f, accuracy %.2f%%\n", ckpt, dataset,
               split, n, loss, 100 * metric);
    } else {
        printf("%s on %s (%s, %" PRId64 " samples): loss %.4f, MAE %.4g\n", ckpt, dataset, split, n,
               loss, metric);
    }
    stoke_dataset_close(d);
    stoke_saved_model_free(m);
    return rc;
}
