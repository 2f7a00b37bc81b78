/* fault.h - the trainer's fault seam, for tests only (no source of src/ includes it but
 * loop.c, which calls it). A failure within training (a workspace that grows at step N
 * and is refused) cannot wait for a machine to run out of memory: a test installs a
 * function the loop asks before each batch, and what it returns ends that batch as the
 * allocation's failure would (the trainer halves the batch and redoes the step). No
 * environment variable, no public header: the library's users cannot reach it.
 * docs/testing.md, "The trainer's fault seam". */
#ifndef STOKE_TRAIN_FAULT_H
#define STOKE_TRAIN_FAULT_H

#include <stdint.h>

#include "stoke/core.h"

/* Asked before batch `batch` (0: the first) of optimizer step `step`, of `size`
 * samples; STOKE_OK lets it run, anything else (set with stoke_fail) fails it. */
typedef stoke_status (*train_batch_fault_fn)(void *ctx, int64_t step, int batch, int64_t size);

/* Installs `fn` (NULL: none, the default) for every trainer of the process. Not
 * thread-safe: set before the trainers run. */
void train_set_batch_fault(train_batch_fault_fn fn, void *ctx);

#endif
