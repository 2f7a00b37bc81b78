/* marks.h - the training step's phases timed on the clock of the device that runs
 * them (stoke_model_mark). Internal to src/nn. */
#ifndef STOKE_NN_MARKS_H
#define STOKE_NN_MARKS_H

#include "nn/backend_impl.h"

typedef struct nn_marks nn_marks;

nn_marks *nn_marks_new(void); /* NULL: out of memory */
void nn_marks_free(nn_marks *k, const nn_backend *be);
/* Marks the end of phase p (or a start, STOKE_PHASE_START) after the work queued. */
void nn_marks_mark(nn_marks *k, const nn_backend *be, stoke_phase p);
/* Adds into sec[phase] the seconds of the phases completed since the last call. */
void nn_marks_take(nn_marks *k, const nn_backend *be, bool wait, double *sec);

#endif
