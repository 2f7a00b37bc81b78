/* test_core.c - status names, last error, file helpers, byte formatting. */
#include "check.h"
#include "stoke/core.h"

#include <unistd.h>

int main(void)
{
    CHECK_STR_EQ(stoke_status_name(STOKE_OK), "ok");
    CHECK_STR_EQ(stoke_status_name(STOKE_ERR_FORMAT), "format");

    stoke_status s = stoke_fail(STOKE_ERR_IO, "%s: offset %d: bad", "x.bin", 12);
    CHECK_INT_EQ(s, STOKE_ERR_IO);
    CHECK_STR_EQ(stoke_last_error(), "x.bin: offset 12: bad");

    char buf[64];
    CHECK(stoke_read_file("/nonexistent/stoke", buf, sizeof buf) == -1);
    long n = stoke_read_line("/proc/sys/kernel/ostype", buf, sizeof buf);
    CHECK(n > 0);
    CHECK_STR_EQ(buf, "Linux");
    /* A file larger than the buffer is cut and still terminated. */
    char tiny[4];
    CHECK_INT_EQ(stoke_read_file("/proc/sys/kernel/ostype", tiny, sizeof tiny), 3);
    CHECK_STR_EQ(tiny, "Lin");

    CHECK_STR_EQ(stoke_format_bytes(12.3e9, buf, sizeof buf), "12.3 GB");
    CHECK_STR_EQ(stoke_format_bytes(999, buf, sizeof buf), "999 B");
    CHECK_STR_EQ(stoke_format_bytes(1500, buf, sizeof buf), "1.5 kB");
    CHECK_STR_EQ(stoke_format_flops(332.8e9, buf, sizeof buf), "332.8 GFLOP/s");
    CHECK_STR_EQ(stoke_format_flops(5.3248e12, buf, sizeof buf), "5.3 TFLOP/s");
    CHECK_STR_EQ(stoke_format_flops(12, buf, sizeof buf), "12.0 FLOP/s");

    uint64_t t0 = stoke_now_ns();
    usleep(2000);
    CHECK(stoke_now_ns() > t0);
    CHECK(stoke_wall_time() > 1.6e9);
    return CHECK_DONE();
}
