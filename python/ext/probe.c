/* probe.c - (being written) */
#include "ext.h"

int stokepy_add_probe(PyObject *m)
{
    (void)m;
    return 0;
}
