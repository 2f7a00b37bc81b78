/* schedule.c - the learning-rate schedule: warm-up, then constant, step or cosine. */
#include <math.h>

#include "nn/model_impl.h"

double stoke_lr_at(const stoke_lr_schedule *s, int64_t step)
{
    if (step < 0)
        step = 0;
    if (step < s->warmup_steps) /* linear warm-up: lr/W, 2 lr/W, ..., lr */
        return s->lr * (double)(step + 1) / (double)s->warmup_steps;
    int64_t t = step - (s->warmup_steps > 0 ? s->warmup_steps : 0);
    switch (s->kind) {
    case STOKE_LR_STEP:
        return s->step_size > 0 ? s->lr * pow(s->gamma, (double)(t / s->step_size)) : s->lr;
    case STOKE_LR_COSINE: {
        int64_t T = s->total_steps - (s->warmup_steps > 0 ? s->warmup_steps : 0);
        if (T <= 0 || t >= T)
            return s->min_lr;
        return s->min_lr + (s->lr - s->min_lr) * (1 + cos(M_PI * (double)t / (double)T)) / 2;
    }
    case STOKE_LR_CONSTANT: break;
    }
    return s->lr;
}
