/* fuzz_report.c - `stoke report`'s readers on arbitrary bytes, as each input kind (the
 * training log, the monitor's JSON lines, bench's and tune's JSON) and through the
 * detection, then the page rendered from what was read: a bad line is refused with a
 * message naming the file, never a crash, hang or leak, and every series stays within
 * the downsampler's cap. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || size > (1u << 20))
        return 0;
    rp_report *r = malloc(sizeof *r);
    if (!r)
        return 0;
    rp_report_init(r);
    for (int k = RP_NONE; k <= RP_TUNE; k++) {
        FILE *f = fmemopen((void *)data, size, "r");
        if (!f)
            break;
        rp_kind kind = (rp_kind)k;
        stoke_status s = k == RP_NONE ? rp_detect(f, "in.jsonl", &kind) : STOKE_OK;
        if (s == STOKE_OK && kind != RP_NONE && !r->path[kind][0])
            s = rp_read(r, f, "in.jsonl", kind);
        if (s != STOKE_OK && !strstr(stoke_last_error(), "in.jsonl"))
            abort(); /* every refusal names the file */
        fclose(f);
    }
    rp_out o;
    if (rp_series_points(&r->loss, &o)) {
        if (o.points > RP_MAX_POINTS)
            abort();
        free(o.p);
    }
    rp_buf b = {0};
    rp_render(r, &b);
    free(b.s);
    rp_report_free(r);
    free(r);
    return 0;
}
