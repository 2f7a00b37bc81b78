/* monitor.c - (being written) */
#include "ext.h"

int stokepy_add_monitor(PyObject *m)
{
    (void)m;
    return 0;
}
