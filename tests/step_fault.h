/* step_fault.h - the fault the tests install in the trainer's seam (src/train/fault.h):
 * batch M (0: the first) of optimizer step N fails once with STOKE_ERR_NOMEM, as a
 * workspace grown within training would. "test fault" starts its message, so a test
 * can tell it from a real one. */
#ifndef STOKE_TESTS_STEP_FAULT_H
#define STOKE_TESTS_STEP_FAULT_H

#include <inttypes.h>
#include <stdbool.h>

#include "train/fault.h"

typedef struct step_fault {
    bool on; /* once: off after it failed a batch */
    int64_t step;
    int batch;
} step_fault;

static stoke_status step_fault_fn(void *ctx, int64_t step, int batch, int64_t size)
{
    step_fault *f = ctx;
    if (!f->on || f->step != step || f->batch != batch)
        return STOKE_OK;
    f->on = false;
    return stoke_fail(STOKE_ERR_NOMEM,
                      "test fault: the workspace of batch %" PRId64 " refused at step %" PRId64
                      ", batch %d of it",
                      size, step, batch);
}

/* Installs f failing batch `batch` of step `step`; step_fault_clear removes it. */
static inline void step_fault_set(step_fault *f, int64_t step, int batch)
{
    *f = (step_fault){.on = true, .step = step, .batch = batch};
    train_set_batch_fault(step_fault_fn, f);
}

static inline void step_fault_clear(void) { train_set_batch_fault(NULL, NULL); }

#endif
