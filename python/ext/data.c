/* data.c - (being written) */
#include "ext.h"

bool stokepy_pipeline(void *ctx, struct stoke_mon_pipeline *out)
{
    (void)ctx, (void)out;
    return false;
}

int stokepy_add_data(PyObject *m)
{
    (void)m;
    return 0;
}
