/* dl.c - loading one of NVIDIA's libraries into its driver table (libs.h): the file
 * an environment variable names (the tests' doubles), else the first of the usual
 * names that loads, then every function the table holds. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/regular.h"
#include "nn/cuda/libs.h"

/* "a, b and c" from names, for the message when none loads. */
static void list(const char *const *names, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; names[i] && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s",
                              i == 0         ? ""
                              : names[i + 1] ? ", "
                                             : " and ",
                              names[i]);
}

stoke_status nn_dl_open(const nn_dl_lib *l, void *table, const char **tried)
{
    const char *env = getenv(l->env);
    void *lib = NULL;
    *tried = env && *env ? env : l->names[0];
    if (env && *env) {
        if (stoke_check_library(l->env, env) != STOKE_OK)
            return STOKE_ERR_UNAVAILABLE; /* a FIFO would hang dlopen */
        if (!(lib = dlopen(env, RTLD_NOW | RTLD_LOCAL))) {
            const char *why = dlerror();
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s=%s: %s", l->env, env,
                              why ? why : "not loaded");
        }
    } else {
        for (int i = 0; l->names[i] && !lib; i++)
            if ((lib = dlopen(l->names[i], RTLD_NOW | RTLD_LOCAL)))
                *tried = l->names[i];
        if (!lib) {
            char names[512];
            list(l->names, names, sizeof names);
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s not found (tried %s)", l->what, names);
        }
    }
    memcpy(table, &lib, sizeof lib);
    for (size_t i = 0; i < l->nsyms; i++) {
        void *f = dlsym(lib, l->syms[i].name);
        memcpy((char *)table + l->syms[i].offset, &f, sizeof f);
        if (!f && !l->syms[i].optional) /* the library stays loaded: see nn_cublas_close */
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s lacks %s", *tried, l->syms[i].name);
    }
    return STOKE_OK;
}

int nn_dl_soname_version(const char *name)
{
    const char *so = strstr(name, ".so.");
    return so ? atoi(so + 4) : 0;
}
