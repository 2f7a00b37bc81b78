/* tf32.h - the TF32 rule: whether fp32 matmuls and convolutions run on TF32 tensor
 * cores on a GPU of a given compute capability. One pure function, so tune (the run's
 * decision, stoke probe's recommendation) and the CUDA backend (a model made without a
 * decision) answer alike. Internal. */
#ifndef STOKE_CORE_TF32_H
#define STOKE_CORE_TF32_H

#include <stdbool.h>

/* True from compute capability 8.0 (Ampere), whose tensor cores have TF32: on by
 * default there, as PyTorch's allow_tf32 for convolutions. */
bool stoke_tf32_rule(int cc_major, int cc_minor);

#endif
