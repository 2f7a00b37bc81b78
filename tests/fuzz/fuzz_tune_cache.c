/* fuzz_tune_cache.c - the tuning cache entry's reader (train_tune_cache_parse: the key
 * line, the measured line, the five settings through the --config parser) on arbitrary
 * bytes, under the key the seeds were written with: it must take the entry with values a
 * run could use, or refuse it with a message naming the file, never crash, hang or
 * leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"

#define KEY "stoke-tune-1|cpu=Fuzz CPU|cpus=2|simd=ff|mem=8G|model=mlp|data=/d:1:2|limit=0"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    train_tune_entry e;
    char why[600] = "";
    if (!train_tune_cache_parse("entry.yaml", (const char *)data, size, KEY, &e, why, sizeof why)) {
        if (!strstr(why, "entry.yaml"))
            abort(); /* every refusal names the file */
        return 0;
    }
    /* taken: values a run can be given (the bounds of the machine are the caller's) */
    if (e.best.batch < 1 || e.best.workers < 0 || e.best.prefetch < 1 || e.best.threads < 1 ||
        !e.precision[0] || e.measured[0] != ' ')
        abort();
    return 0;
}
