/* dl.c - cuBLAS, cuBLASLt and cuDNN through core's loader (core/dl.h), in the words
 * their messages have always had: "cuBLAS not found (tried ...)", "ENV=PATH: why". */
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "nn/cuda/libs.h"

stoke_status nn_dl_open(const nn_dl_lib *l, void *table, const char **tried)
{
    const stoke_dl_lib lib = {.what = l->what,
                              .env = l->env,
                              .names = l->names,
                              .syms = l->syms,
                              .nsyms = l->nsyms,
                              .words = STOKE_DL_WORDS_LIST};
    /* The variable's literal name is in each library's descriptor (cublas.c, ...). On a
     * missing function the library stays loaded: see nn_cublas_close. */
    return stoke_dl_open(&lib, stoke_env(l->env), table, tried);
}

int nn_dl_soname_version(const char *name)
{
    const char *so = strstr(name, ".so.");
    return so ? atoi(so + 4) : 0;
}
