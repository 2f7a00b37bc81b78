/* write.c - `stoke report` from files to a page: the inputs recognised, read, rendered
 * and written through core/tmpfile (no half page on a failure or a signal). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tmpfile.h"
#include "report/report.h"
#include "stoke/report.h"

stoke_status stoke_report_write(const char *const *inputs, const char *const *names, int n,
                                const char *out, size_t *bytes)
{
    rp_report *r = malloc(sizeof *r);
    if (!r)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    rp_report_init(r);
    stoke_status s = STOKE_OK;
    for (int i = 0; i < n && s == STOKE_OK; i++) {
        const char *name = names && names[i] ? names[i] : inputs[i];
        FILE *f = fopen(inputs[i], "r");
        if (!f) {
            s = stoke_fail(STOKE_ERR_IO, "%s: cannot open it: %s", name, strerror(errno));
            break;
        }
        rp_kind k;
        s = rp_detect(f, name, &k);
        if (s == STOKE_OK && r->path[k][0])
            s = stoke_fail(STOKE_ERR_ARG, "%s and %s are both a %s: give one of each kind",
                           r->path[k], name, rp_kind_name(k));
        if (s == STOKE_OK)
            s = rp_read(r, f, name, k);
        fclose(f);
    }
    rp_buf b = {0};
    if (s == STOKE_OK) {
        rp_render(r, &b);
        if (b.failed)
            s = stoke_fail(STOKE_ERR_NOMEM, "out of memory writing the page");
    }
    if (s == STOKE_OK) {
        stoke_tmpfile t;
        s = stoke_tmpfile_open(&t, out);
        if (s == STOKE_OK)
            s = stoke_tmpfile_write(&t, b.s, b.n);
        if (s == STOKE_OK) /* a failed write has removed the temporary file */
            s = stoke_tmpfile_commit(&t);
    }
    if (bytes)
        *bytes = b.n;
    free(b.s);
    rp_report_free(r);
    free(r);
    return s;
}
