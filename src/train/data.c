/* data.c - the trainer's datasets: the training set and its validation set found and
 * opened, held in memory when they fit, and the statistics the model's input needs. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/trainer.h"

/* Reads the first n samples of src into memory (limit and in-memory holding in one
 * pass). The arrays are owned by the returned dataset (copy = true, then freed). */
static stoke_status load_prefix(stoke_dataset *src, int64_t n, stoke_dataset **out)
{
    stoke_dataset_info info = *stoke_dataset_get_info(src);
    if (n <= 0 || n > info.count)
        n = info.count;
    if (n == info.count)
        return stoke_dataset_load(src, out);
    info.count = n;
    unsigned char *in = malloc((size_t)n * info.input_bytes);
    unsigned char *tg = info.target_bytes ? malloc((size_t)n * info.target_bytes) : NULL;
    if (!in || (info.target_bytes && !tg)) {
        free(in);
        free(tg);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory holding %" PRId64 " samples", n);
    }
    stoke_status s = STOKE_OK;
    for (int64_t i = 0; i < n && s == STOKE_OK; i++)
        s = stoke_dataset_read(src, i, in + (size_t)i * info.input_bytes,
                               tg ? tg + (size_t)i * info.target_bytes : NULL);
    if (s == STOKE_OK)
        s = stoke_dataset_from_arrays(&info, in, tg, true, out);
    free(in);
    free(tg);
    return s;
}

bool stoke_train_reads_originals(const stoke_train_config *c, const stoke_dataset *d)
{
    train_aug train, eval; /* the transforms' own reading of the config, not a second one */
    train_aug_of(c->augment, c->transforms, &train, &eval);
    return (train == TRAIN_AUG_RRC || train == TRAIN_AUG_RRC_JITTER) &&
           stoke_dataset_has_originals(d);
}

bool stoke_train_holds_in_memory(const stoke_train_config *c, const stoke_dataset *d, double bytes,
                                 uint64_t available)
{
    return !stoke_train_reads_originals(c, d) &&
           (available == 0 || bytes <= (double)available / 4.0);
}

/* Per-channel mean and std of the training inputs (in the [0, 1] scale for u8), over
 * at most 10,000 samples spread over the set, for the normalize transform. */
stoke_status train_input_stats(stoke_dataset *d, train_input *ti)
{
    int channels = 0;
    return stoke_dataset_channel_stats(d, TRAIN_STATS_SAMPLES, &channels, ti->mean, ti->std);
}

static bool is_subdir(const char *path, const char *name)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", path, name);
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Samples held in memory (a --limit prefix, the validation set) must fit in what is
 * available, or the copy grows toward the OOM killer. */
static stoke_status check_hold(const char *path, const char *flag, int64_t n, double bytes,
                               uint64_t avail)
{
    if (avail == 0 || bytes <= (double)avail)
        return STOKE_OK;
    char a[32], b[32];
    return stoke_fail(STOKE_ERR_NOMEM,
                      "%s: holding %" PRId64 " samples in memory takes %s, "
                      "and %s is available: lower %s",
                      path, n, stoke_format_bytes(bytes, a, sizeof a),
                      stoke_format_bytes((double)avail, b, sizeof b), flag);
}

/* Host bytes per sample of a loader's ring over d: its slots x (the input as fed to the
 * model + the target + the sample index), as stoke_loader_create allocates it. */
size_t train_ring_per_sample(const stoke_trainer *t, stoke_dataset *d, int workers, int prefetch)
{
    stoke_loader_opts o = {.workers = workers, .prefetch = prefetch};
    const stoke_dataset_info *i = stoke_dataset_get_info(d);
    size_t in = t->input.image ? (size_t)stoke_shape_elems(&t->input.model_shape) * sizeof(float)
                               : i->input_bytes;
    return (size_t)stoke_loader_slots(&o) * (in + i->target_bytes + sizeof(int64_t));
}

/* An image folder's entries that opening left out (symbolic links out of their class
 * folder, loops): a warning, as `stoke data` gives. */
static void warn_skipped(stoke_trainer *t, const char *path, const stoke_dataset *d)
{
    const char *ex;
    int64_t skipped = stoke_dataset_skipped(d, &ex);
    if (skipped <= 0)
        return;
    char w[1400];
    snprintf(w, sizeof w, "%s: %" PRId64 " entr%s left out, e.g. %.1200s", path, skipped,
             skipped == 1 ? "y" : "ies", ex);
    stoke_train_event e = {.kind = STOKE_EV_WARNING, .text = w};
    train_emit(t, &e);
}

stoke_status train_open_data(stoke_trainer *t)
{
    const stoke_train_config *c = &t->cfg;
    /* An IDX directory holds both splits side by side (no split: its train-* files);
     * an image folder either has them as subfolders (PATH/train, PATH/val, as
     * torchvision's ImageFolder users lay them out) or is itself the training set
     * (PATH/<class>/...), as `stoke data info PATH` reads it. */
    bool train_dir = is_subdir(c->dataset, "train");
    stoke_dataset_opts o = {.split = train_dir ? "train" : NULL};
    stoke_status s = stoke_dataset_open(c->dataset, &o, &t->train_src);
    if (s != STOKE_OK)
        return s;
    t->info = *stoke_dataset_get_info(t->train_src);
    warn_skipped(t, c->dataset, t->train_src);
    /* Held in memory, the loader gathers batches without touching storage. */
    uint64_t avail =
        c->memory_budget > 0 ? (uint64_t)c->memory_budget : t->machine.mem.available_bytes;
    int64_t n = c->limit > 0 && c->limit < t->info.count ? c->limit : t->info.count;
    double bytes = (double)n * (double)(t->info.input_bytes + t->info.target_bytes);
    /* RandomResizedCrop on images read from their originals draws a new window on the
     * original every epoch: decoded pixels held in memory would freeze it. */
    bool originals = stoke_train_reads_originals(c, t->train_src);
    bool in_memory = stoke_train_holds_in_memory(c, t->train_src, bytes, avail);
    if (!in_memory && !originals && c->limit > 0 &&
        (s = check_hold(c->dataset, "--limit", n, bytes, avail)) != STOKE_OK)
        return s;
    if (originals) {
        t->train_d = t->train_src;
        if (n < t->info.count &&
            (s = stoke_dataset_prefix(t->train_src, n, &t->train_d)) != STOKE_OK)
            return s;
    } else if (in_memory || c->limit > 0) {
        /* decoding a folder of images takes seconds before the dataset line: said */
        if (stoke_dataset_has_originals(t->train_src))
            train_info(t, "preparing: decoding %" PRId64 " images of %s into memory...", n,
                       c->dataset);
        s = load_prefix(t->train_src, n, &t->train_d);
        if (s != STOKE_OK)
            return s;
        t->held_bytes += bytes;
    } else {
        t->train_d = t->train_src;
    }
    t->info = *stoke_dataset_get_info(t->train_d);
    char sh[64];
    train_info(t, "dataset: %s: %" PRId64 " samples of %s %s%s (%s)%s", c->dataset, t->info.count,
               stoke_shape_format(&t->info.input_shape, sh, sizeof sh),
               stoke_dtype_name(t->info.input_dtype), c->limit > 0 ? ", limited" : "",
               stoke_dataset_get_info(t->train_src)->format,
               in_memory   ? ", held in memory"
               : originals ? ", decoded from the originals every epoch"
                           : "");
    /* Validation: the given set, the test split of an IDX directory, or the val (else
     * test) subfolder of an image folder that has a train subfolder. */
    const char *src_format = stoke_dataset_get_info(t->train_src)->format;
    const char *vsplit = !strcmp(src_format, "idx") ? "test"
                         : !strcmp(src_format, "images") && train_dir
                             ? (is_subdir(c->dataset, "val")    ? "val"
                                : is_subdir(c->dataset, "test") ? "test"
                                                                : NULL)
                             : NULL;
    if ((c->val_dataset[0] || vsplit) && !t->trial.on) { /* a trial measures training only */
        stoke_dataset_opts vo = {.split = vsplit};
        const char *vpath = c->val_dataset[0] ? c->val_dataset : c->dataset;
        s = stoke_dataset_open(vpath, c->val_dataset[0] ? NULL : &vo, &t->val_src);
        if (s != STOKE_OK && (c->val_dataset[0] || strcmp(src_format, "idx")))
            return s;
        if (s == STOKE_OK) {
            warn_skipped(t, vpath, t->val_src);
            const stoke_dataset_info *vi = stoke_dataset_get_info(t->val_src);
            /* class indices follow the sorted folder names: the splits must agree */
            if (!c->val_dataset[0] && !strcmp(src_format, "images") &&
                vi->num_classes != t->info.num_classes)
                return stoke_fail(STOKE_ERR_FORMAT,
                                  "%s/%s has %" PRId64 " class folders and "
                                  "%s/train %" PRId64 ": the class indices would not match",
                                  c->dataset, vsplit, vi->num_classes, c->dataset,
                                  t->info.num_classes);
            int64_t vn = c->val_limit > 0 && c->val_limit < vi->count ? c->val_limit : vi->count;
            /* the validation transform (resize shorter + centre crop) on originals too */
            if (originals && stoke_dataset_has_originals(t->val_src)) {
                if ((s = stoke_dataset_prefix(t->val_src, vn, &t->val_d)) != STOKE_OK)
                    return s;
            } else {
                if ((s = check_hold(vpath, "--val-limit", vn,
                                    (double)vn * (double)(vi->input_bytes + vi->target_bytes),
                                    avail)) != STOKE_OK)
                    return s;
                if (stoke_dataset_has_originals(t->val_src))
                    train_info(
                        t, "preparing: decoding %" PRId64 " validation images into memory...", vn);
                if ((s = load_prefix(t->val_src, vn, &t->val_d)) != STOKE_OK)
                    return s;
                t->held_bytes += (double)vn * (double)(vi->input_bytes + vi->target_bytes);
            }
            t->val_count = vn;
            train_info(t, "validation: %s%s%s%s: %" PRId64 " samples", vpath,
                       c->val_dataset[0] ? "" : " (", c->val_dataset[0] ? "" : vsplit,
                       c->val_dataset[0] ? "" : " split)", vn);
            return STOKE_OK;
        }
        t->val_src = NULL;
    }
    train_info(t, "validation: none (give --val-dataset)");
    return STOKE_OK;
}

/* The actor-critic's actions for rows [action, advantage, ...]: the largest action
 * (column 0) in the training and validation sets + 1, as a class count is found. */
stoke_status train_count_actions(stoke_dataset *d, const char *path, int64_t *actions)
{
    const stoke_dataset_info *in = stoke_dataset_get_info(d);
    unsigned char *x = malloc(in->input_bytes), *y = malloc(in->target_bytes);
    stoke_status s = x && y ? STOKE_OK : stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < in->count && s == STOKE_OK; i++) {
        if ((s = stoke_dataset_read(d, i, x, y)) != STOKE_OK)
            break;
        double a = train_read_num(y, in->target_dtype, 0);
        if (!(a >= 0 && a < 1 << 24) || a != floor(a))
            s = stoke_fail(STOKE_ERR_ARG,
                           "%s: sample %" PRId64 ": action %g (the target's first "
                           "value) is not a whole number in [0, 2^24)",
                           path, i, a);
        else if ((int64_t)a + 1 > *actions)
            *actions = (int64_t)a + 1;
    }
    free(x);
    free(y);
    return s;
}
