/* tuning.h - what the measured search (tune.c) and the tuning cache (tune_cache.c)
 * share: the settings open to measurement, the cache's key, entry and file. */
#ifndef STOKE_TRAIN_TUNING_H
#define STOKE_TRAIN_TUNING_H

#include "train/trainer.h"

/* The settings a search measures (the rest are given, or the rules'). */
typedef struct tune_open {
    bool batch, workers, prefetch, threads, precision;
} tune_open;

/* The cache key of t's run: the machine, model, dataset and the settings given, one
 * line, allocated whole (the caller frees it; NULL when out of memory). */
char *train_tune_cache_key(const stoke_trainer *t);

/* The settings file `stoke train --config` reads for result r of the settings o, the
 * measurement as comments (allocated; NULL when out of memory). */
char *train_tuned_yaml(const stoke_trainer *t, const tune_open *o, const stoke_tune_result *r,
                       const char *key, double seconds);

/* `text` written whole to `path` (aside, then renamed). */
stoke_status train_write_file(const char *path, const char *text);

/* The cached point at `path` for this key, when it agrees with every setting the run
 * gives and lies within sp's bounds; false, with why, when it does not. */
bool train_tune_cache_read(const char *path, const char *key, const stoke_train_config *run,
                           const tune_open *o, const stoke_tune_space *sp, stoke_tune_result *res,
                           char *why, size_t wn);

#endif
