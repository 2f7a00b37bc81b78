/* transform_cost.c - which transforms are one cheap pass per sample: the fact the
 * tuner's in-memory rule (the training thread gathers) needs, asked by `stoke train`
 * and by the Python loader alike so both decide the same. */
#include "stoke/data.h"

bool stoke_transform_one_pass(const stoke_transform_opts *o)
{
    if (!o)
        return true;
    bool normalize_only = true, fused = o->in_dtype == STOKE_U8;
    for (int i = 0; i < o->nops; i++) {
        stoke_op_kind k = o->ops[i].kind;
        normalize_only = normalize_only && k == STOKE_OP_NORMALIZE;
        fused = fused && (k == STOKE_OP_CROP || k == STOKE_OP_HFLIP || k == STOKE_OP_NORMALIZE);
    }
    return normalize_only || fused;
}
