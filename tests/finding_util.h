/* finding_util.h - looking into the diagnosis's findings, for the monitor's tests. */
#ifndef STOKE_TEST_FINDING_UTIL_H
#define STOKE_TEST_FINDING_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "stoke/monitor.h"

/* The finding of rule `id` among f[0..n), NULL when there is none. */
static inline const stoke_finding *find(const stoke_finding *f, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].rule->id, id) == 0)
            return &f[i];
    return NULL;
}

/* The figure called name of x, NAN when x has none. */
static inline double figure(const stoke_finding *x, const char *name)
{
    const stoke_finding_figure *g = stoke_finding_figure_of(x, name);
    return g ? g->value : NAN;
}

static inline bool same(double a, double b) { return (isnan(a) && isnan(b)) || fabs(a - b) < 1e-9; }

#endif
