/* names.c - the words for a model's options (precision and optimizer names) that the
 * configuration, the logs and the model file print and parse. */
#include <string.h>

#include "nn/model_impl.h"

const char *stoke_precision_name(stoke_precision p)
{
    switch (p) {
    case STOKE_PREC_FP32: return "fp32";
    case STOKE_PREC_BF16: return "bf16";
    case STOKE_PREC_FP16: return "fp16";
    }
    return "?";
}

bool stoke_precision_parse(const char *s, stoke_precision *out)
{
    for (int p = STOKE_PREC_FP32; p <= STOKE_PREC_FP16; p++)
        if (s && strcmp(s, stoke_precision_name((stoke_precision)p)) == 0) {
            *out = (stoke_precision)p;
            return true;
        }
    return false;
}

const char *stoke_optim_name(stoke_optim_kind k)
{
    return k == STOKE_SGD ? "sgd" : k == STOKE_ADAMW ? "adamw" : "?";
}
