/* env.c - the one reader of the process environment (env.h says why). */
#include "core/env.h"

#include <stdlib.h>

const char *stoke_env(const char *name)
{
    return getenv(name);
}
