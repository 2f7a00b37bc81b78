/* test_core.c - status names, last error, file helpers, byte formatting, the CPU
 * instruction-set cap, unsigned numbers from outside text, JSON that is valid UTF-8. */
#include "check.h"
#include "core/isa.h"
#include "core/json.h"
#include "core/parse.h"
#include "core/text.h"
#include "stoke/core.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <unistd.h>

/* The instruction-set cap: names, the levels of CPU features, which dispatch features
 * a cap allows (pure, for made-up CPUs), and setting it before and after first use. */
static void test_isa_cap(void)
{
    stoke_cpu_isa v = STOKE_CPU_ISA_ALL;
    CHECK_INT_EQ(stoke_cpu_isa_parse("AVX512_core_VNNI", &v), STOKE_OK);
    CHECK_INT_EQ(v, STOKE_CPU_ISA_AVX512_CORE_VNNI);
    for (int i = STOKE_CPU_ISA_SSE41; i <= STOKE_CPU_ISA_ALL; i++) {
        CHECK_INT_EQ(stoke_cpu_isa_parse(stoke_cpu_isa_name((stoke_cpu_isa)i), &v), STOKE_OK);
        CHECK_INT_EQ(v, i);
    }
    CHECK_INT_EQ(stoke_cpu_isa_parse("avx512", &v), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "'avx512' is not a CPU ISA level (sse41, avx2, ");
    CHECK_INT_EQ(stoke_cpu_isa_parse("", &v), STOKE_ERR_ARG);
    CHECK_INT_EQ(v, STOKE_CPU_ISA_ALL); /* untouched */
    CHECK_STR_EQ(stoke_cpu_isa_name((stoke_cpu_isa)42), "unknown");

    CHECK_INT_EQ(stoke_isa_level_of_flag("sse4_1"), STOKE_CPU_ISA_SSE41);
    CHECK_INT_EQ(stoke_isa_level_of_flag("sse4_2"), STOKE_CPU_ISA_AVX2);
    CHECK_INT_EQ(stoke_isa_level_of_flag("f16c"), STOKE_CPU_ISA_AVX2);
    CHECK_INT_EQ(stoke_isa_level_of_flag("avx512vl"), STOKE_CPU_ISA_AVX512_CORE);
    CHECK_INT_EQ(stoke_isa_level_of_flag("avx512_vnni"), STOKE_CPU_ISA_AVX512_CORE_VNNI);
    CHECK_INT_EQ(stoke_isa_level_of_flag("avx512_bf16"), STOKE_CPU_ISA_AVX512_CORE_BF16);
    CHECK_INT_EQ(stoke_isa_level_of_flag("amx_bf16"), STOKE_CPU_ISA_AVX512_CORE_AMX);
    CHECK_INT_EQ(stoke_isa_level_of_flag("avx10_2"), STOKE_CPU_ISA_ALL); /* unknown: hidden */

    const unsigned every =
        STOKE_ISA_F16C | STOKE_ISA_AVX2 | STOKE_ISA_AVX512F | STOKE_ISA_AVX512_BF16;
    CHECK_INT_EQ(stoke_isa_allowed(every, STOKE_CPU_ISA_ALL), every);
    CHECK_INT_EQ(stoke_isa_allowed(every, STOKE_CPU_ISA_AVX512_CORE_BF16), every);
    CHECK_INT_EQ(stoke_isa_allowed(every, STOKE_CPU_ISA_AVX512_CORE_VNNI),
                 every & ~(unsigned)STOKE_ISA_AVX512_BF16);
    CHECK_INT_EQ(stoke_isa_allowed(every, STOKE_CPU_ISA_AVX2), STOKE_ISA_F16C | STOKE_ISA_AVX2);
    CHECK_INT_EQ(stoke_isa_allowed(every, STOKE_CPU_ISA_SSE41), 0);
    /* a cap above the CPU never adds what it lacks */
    CHECK_INT_EQ(stoke_isa_allowed(STOKE_ISA_F16C | STOKE_ISA_AVX2, STOKE_CPU_ISA_ALL),
                 STOKE_ISA_F16C | STOKE_ISA_AVX2);
    CHECK_INT_EQ(stoke_isa_allowed(0, STOKE_CPU_ISA_AVX512_CORE_AMX), 0);

    /* Set before first use, it overrides STOKE_MAX_CPU_ISA whatever that says (even
     * a bad value); afterwards only the same level is accepted. */
    CHECK_INT_EQ(stoke_set_max_cpu_isa((stoke_cpu_isa)42), STOKE_ERR_ARG);
    CHECK_INT_EQ(stoke_set_max_cpu_isa(STOKE_CPU_ISA_AVX512_CORE), STOKE_OK);
    CHECK_INT_EQ(stoke_set_max_cpu_isa(STOKE_CPU_ISA_AVX2), STOKE_OK); /* not fixed yet */
    CHECK_INT_EQ(stoke_max_cpu_isa(&v), STOKE_OK);
    CHECK_INT_EQ(v, STOKE_CPU_ISA_AVX2);
    CHECK_INT_EQ(stoke_isa_usable(), stoke_isa_allowed(stoke_isa_present(), STOKE_CPU_ISA_AVX2));
    CHECK(!(stoke_isa_usable() & STOKE_ISA_AVX512F));
    CHECK_INT_EQ(stoke_set_max_cpu_isa(STOKE_CPU_ISA_AVX2), STOKE_OK);
    CHECK_INT_EQ(stoke_set_max_cpu_isa(STOKE_CPU_ISA_ALL), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "already fixed at avx2");
}

/* A reason longer than its buffer ends in "..." after its last whole word, never in a
 * cut word followed by what came after it ("roun)"). */
static void test_text_cut(void)
{
    char b[24];
    stoke_say(b, sizeof b, "%s", "fits here");
    CHECK_STR_EQ(b, "fits here");
    stoke_say(b, sizeof b, "capped by the %d samples, rounded down", 60000);
    CHECK_STR_EQ(b, "capped by the 60000...");
    stoke_say(b, sizeof b, "%s", "abcdefghijklmnopqrstuvwxyz"); /* one word: cut in it, marked */
    CHECK_STR_EQ(b, "abcdefghijklmnopqrst...");
    stoke_say(b, sizeof b, "%s", "fits");
    stoke_more(b, sizeof b, " and then: %s", "rounded down)");
    CHECK_STR_EQ(b, "fits and then:...");
    stoke_more(b, sizeof b, "%s", ")"); /* once cut, nothing follows the mark */
    CHECK_STR_EQ(b, "fits and then:...");
    char c[48];
    stoke_say(c, sizeof c, "%s", "a");
    stoke_more(c, sizeof c, "%s", " b");
    CHECK_STR_EQ(c, "a b");
}

/* Issue 26 (9): strtoull takes " -5" as 2^64 - 5; the helper takes digits only. */
static void test_parse_u64(void)
{
    uint64_t v = 7;
    CHECK(stoke_parse_u64("0", &v) && v == 0);
    CHECK(stoke_parse_u64("18446744073709551615", &v) && v == UINT64_MAX);
    const char *bad[] = {"", " -5", "-5", "-0", " 5", "+5", "5 ", "5x", "18446744073709551616",
                         "0x10", "\t1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        CHECK_MSG(!stoke_parse_u64(bad[i], &v) && v == 7, "'%s' taken as %llu", bad[i],
                  (unsigned long long)v);
    }
    const char *end;
    CHECK(stoke_parse_u64_prefix("48K", 10, &v, &end) && v == 48 && !strcmp(end, "K"));
    CHECK(stoke_parse_u64_prefix("00ff:1", 16, &v, &end) && v == 255 && *end == ':');
    CHECK(!stoke_parse_u64_prefix("-1:0", 16, &v, &end));
    CHECK(!stoke_parse_u64_prefix(" 1", 16, &v, &end));
    CHECK(!stoke_parse_u64_prefix("0x1", 16, &v, &end));
}

/* Issue 26 (7): JSON that strict readers accept whatever bytes a path holds. Each byte
 * outside a well-formed sequence becomes U+FFFD; valid text is kept as it is. */
static void test_json_utf8(void)
{
    CHECK(stoke_utf8_valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    const char *bad[] = {"\xff", "caf\xe9", "\xc0\xaf" /* overlong '/' */,
                         "\xed\xa0\x80" /* a surrogate */, "\xf4\x90\x80\x80" /* > U+10FFFF */,
                         "\xe2\x82" /* cut */};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(!stoke_utf8_valid(bad[i]), "bad[%zu] taken as UTF-8", i);
    char *r = stoke_utf8_repair("d\xffx/caf\xc3\xa9\xe2\x82");
    CHECK_STR_EQ(r, "d\xef\xbf\xbdx/caf\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd");
    free(r);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", "/data/\xff\xfe.npy");
    cJSON_AddStringToObject(o, "k\x80", "\"q\"\n");
    for (int formatted = 0; formatted < 2; formatted++) {
        char *js = stoke_json_print(o, formatted);
        CHECK(js && stoke_utf8_valid(js));
        CHECK_STR_CONTAINS(js, "/data/\xef\xbf\xbd\xef\xbf\xbd.npy");
        CHECK_STR_CONTAINS(js, "\\\"q\\\"\\n"); /* cJSON's escapes are kept */
        cJSON *back = js ? cJSON_Parse(js) : NULL;
        CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(back, "k\xef\xbf\xbd")));
        cJSON_Delete(back);
        free(js);
    }
    cJSON_Delete(o);
}

int main(void)
{
    test_parse_u64();
    test_json_utf8();
    test_text_cut();
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
    test_isa_cap();
    return CHECK_DONE();
}
