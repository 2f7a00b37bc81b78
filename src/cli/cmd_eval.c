/* cmd_eval.c - `stoke eval CHECKPOINT`: the saved model's loss and accuracy (or MAE) on
 * a dataset, by default the test split of the dataset it was trained on. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "stoke/train.h"

void cmd_eval_usage(void)
{
    printf("usage: stoke eval CHECKPOINT [--dataset PATH] [--split NAME] [--limit N]\n"
           "                  [--batch-size N]\n\n"
           "Evaluates a checkpoint written by `stoke train` on a dataset: the one it was\n"
           "trained on (its \"test\" split, for IDX directories) unless --dataset is given.\n"
           "Prints the mean loss and the accuracy (classes) or MAE (regression).\n");
}

int cmd_eval(int argc, char **argv)
{
    const char *ckpt = NULL, *dataset = NULL, *split = "test";
    stoke_dataset_opts given = {0}; /* the options given, checked against the format */
    long limit = 0, batch = 1000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            cmd_eval_usage();
            return 0;
        }
        bool has = i + 1 < argc;
        if (!strcmp(a, "--dataset") && has)
            dataset = argv[++i];
        else if (!strcmp(a, "--split") && has)
            split = given.split = argv[++i];
        else if (!strcmp(a, "--limit") && has) {
            if (!cli_parse_long(argv[++i], 1, (1L << 40), &limit))
                return cli_usage_error("eval", "--limit: expected a positive count");
        } else if (!strcmp(a, "--batch-size") && has) {
            if (!cli_parse_long(argv[++i], 1, 1L << 20, &batch))
                return cli_usage_error("eval", "--batch-size: expected a positive count");
        } else if (a[0] == '-')
            return cli_usage_error("eval", "unknown option '%s'", a);
        else if (!ckpt)
            ckpt = a;
        else
            return cli_usage_error("eval", "unexpected argument '%s'", a);
    }
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
