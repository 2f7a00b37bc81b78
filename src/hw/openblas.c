/* openblas.c - which kernels the linked OpenBLAS chose, as it reports them. */
#include "stoke/hw.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

void stoke_openblas_probe(stoke_openblas_info *out)
{
    memset(out, 0, sizeof *out);
    /* Both return static strings; the core was chosen when the library was loaded. */
    const char *core = openblas_get_corename();
    const char *config = openblas_get_config();
    snprintf(out->core, sizeof out->core, "%s", core ? core : "");
    snprintf(out->config, sizeof out->config, "%s", config ? config : "");
    /* The config string ends with a space in some builds. */
    size_t n = strlen(out->config);
    while (n > 0 && out->config[n - 1] == ' ')
        out->config[--n] = '\0';
    out->valid = out->core[0] != '\0';
}
