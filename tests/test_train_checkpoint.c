/* test_train_checkpoint.c - safetensors checkpoints: round trip of every dtype and the
 * metadata, the reader's checks on corrupt files, and that a writer killed with SIGKILL
 * at random points leaves the previous checkpoint intact.
 * `test_train_checkpoint --fixture PATH` writes the fixture that tests/safetensors_read.py
 * reads with an independent reader. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "stoke/train.h"

static char dir[256];

static const char *tmp_path(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* The fixture's values are a formula of the element index that
 * tests/safetensors_read.py recomputes with numpy: it must stay in step with it. */
enum { FX_A = 6, FX_B = 5 };
static float fx_f32[FX_A * FX_B];
static uint16_t fx_bf16[FX_A * FX_B], fx_f16[FX_A * FX_B];
static int64_t fx_i64[7];
static uint8_t fx_u8[3 * 2 * 2];
static double fx_f64[1];

static void make_fixture_values(void)
{
    for (int i = 0; i < FX_A * FX_B; i++)
        fx_f32[i] = (float)i * 0.25f - 3.0f + 1.0f / (float)(i + 3);
    stoke_f32_to_bf16(fx_f32, fx_bf16, FX_A * FX_B);
    stoke_f32_to_f16(fx_f32, fx_f16, FX_A * FX_B);
    for (int i = 0; i < 7; i++)
        fx_i64[i] = (int64_t)(i - 3) * 1000000000007LL;
    for (int i = 0; i < 12; i++)
        fx_u8[i] = (uint8_t)(i * 21 + 7);
    fx_f64[0] = 3.141592653589793;
}

static stoke_status write_fixture(const char *path)
{
    make_fixture_values();
    stoke_ckpt_tensor t[] = {
        {.name = "conv1.weight",
         .dtype = STOKE_F32,
         .ndim = 2,
         .shape = {FX_A, FX_B},
         .data = fx_f32},
        {.name = "conv1.weight.bf16",
         .dtype = STOKE_BF16,
         .ndim = 2,
         .shape = {FX_A, FX_B},
         .data = fx_bf16},
        {.name = "conv1.weight.f16",
         .dtype = STOKE_F16,
         .ndim = 3,
         .shape = {FX_A, 1, FX_B},
         .data = fx_f16},
        {.name = "step", .dtype = STOKE_I64, .ndim = 1, .shape = {7}, .data = fx_i64},
        {.name = "bytes", .dtype = STOKE_U8, .ndim = 3, .shape = {3, 2, 2}, .data = fx_u8},
        {.name = "scalar", .dtype = STOKE_F64, .ndim = 0, .data = fx_f64},
        {.name = "empty", .dtype = STOKE_F32, .ndim = 2, .shape = {0, 4}, .data = NULL},
    };
    stoke_ckpt_kv meta[] = {{"format", "pt"},
                            {"stoke.step", "1234"},
                            {"stoke.note", "quotes \" and \\ and unicode \xc3\xa9"}};
    return stoke_ckpt_write(path, t, sizeof t / sizeof t[0], meta, 3);
}

/* Removes the writer's temporary files (".NAME.stoke-tmp-XXXXXX") from the test
 * directory; returns how many there were. */
static int remove_temporary_files(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".stoke-tmp-")) {
            char p[600]; /* not tmp_path: callers hold its rotating buffers */
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
            n++;
        }
    if (d)
        closedir(d);
    return n;
}

static void test_round_trip(void)
{
    const char *p = tmp_path("rt.safetensors");
    CHECK_INT_EQ(write_fixture(p), STOKE_OK);
    stoke_ckpt *c;
    CHECK_INT_EQ(stoke_ckpt_open(p, &c), STOKE_OK);
    if (!c)
        return;
    CHECK_INT_EQ(stoke_ckpt_count(c), 7);
    const stoke_ckpt_tensor *w = stoke_ckpt_find(c, "conv1.weight");
    CHECK(w && w->dtype == STOKE_F32 && w->ndim == 2 && w->shape[0] == FX_A &&
          w->shape[1] == FX_B && w->nbytes == sizeof fx_f32);
    CHECK(w && memcmp(w->data, fx_f32, sizeof fx_f32) == 0);
    const stoke_ckpt_tensor *b = stoke_ckpt_find(c, "conv1.weight.bf16");
    CHECK(b && b->dtype == STOKE_BF16 && memcmp(b->data, fx_bf16, sizeof fx_bf16) == 0);
    const stoke_ckpt_tensor *h = stoke_ckpt_find(c, "conv1.weight.f16");
    CHECK(h && h->dtype == STOKE_F16 && h->ndim == 3 &&
          memcmp(h->data, fx_f16, sizeof fx_f16) == 0);
    const stoke_ckpt_tensor *i = stoke_ckpt_find(c, "step");
    CHECK(i && i->dtype == STOKE_I64 && memcmp(i->data, fx_i64, sizeof fx_i64) == 0);
    const stoke_ckpt_tensor *u = stoke_ckpt_find(c, "bytes");
    CHECK(u && u->dtype == STOKE_U8 && memcmp(u->data, fx_u8, sizeof fx_u8) == 0);
    const stoke_ckpt_tensor *s = stoke_ckpt_find(c, "scalar");
    /* Tensors are packed back to back, so a tensor after an odd-sized one is not
     * aligned: compare bytes rather than load a double through the pointer. */
    CHECK(s && s->ndim == 0 && s->nbytes == 8 && memcmp(s->data, fx_f64, 8) == 0);
    const stoke_ckpt_tensor *e = stoke_ckpt_find(c, "empty");
    CHECK(e && e->nbytes == 0 && e->shape[0] == 0 && e->shape[1] == 4);
    CHECK(stoke_ckpt_find(c, "nope") == NULL);
    CHECK_STR_EQ(stoke_ckpt_meta(c, "stoke.step"), "1234");
    CHECK_STR_EQ(stoke_ckpt_meta(c, "stoke.note"), "quotes \" and \\ and unicode \xc3\xa9");
    CHECK(stoke_ckpt_meta(c, "absent") == NULL);
    CHECK_INT_EQ(stoke_ckpt_meta_count(c), 3);
    /* Offset order: the tensors tile the data in the order they were written. */
    for (size_t k = 1; k < stoke_ckpt_count(c); k++)
        CHECK((const char *)stoke_ckpt_tensor_at(c, k)->data >=
              (const char *)stoke_ckpt_tensor_at(c, k - 1)->data);
    stoke_ckpt_close(c);

    /* The data starts 8-byte aligned, as the reference writer pads it. */
    FILE *f = fopen(p, "rb");
    unsigned char len8[8] = {0};
    CHECK(f && fread(len8, 1, 8, f) == 8);
    if (f)
        fclose(f);
    uint64_t hlen = 0;
    for (int k = 0; k < 8; k++)
        hlen |= (uint64_t)len8[k] << (8 * k);
    CHECK_INT_EQ((8 + hlen) % 8, 0);
    /* No temporary file is left behind. */
    CHECK_INT_EQ(remove_temporary_files(), 0);
}

static void test_write_errors(void)
{
    float x[2] = {1, 2};
    stoke_ckpt_tensor dup[] = {
        {.name = "a", .dtype = STOKE_F32, .ndim = 1, .shape = {2}, .data = x},
        {.name = "a", .dtype = STOKE_F32, .ndim = 1, .shape = {2}, .data = x},
    };
    const char *p = tmp_path("bad.safetensors");
    CHECK_INT_EQ(stoke_ckpt_write(p, dup, 2, NULL, 0), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "'a'");
    CHECK(access(p, F_OK) != 0);
    stoke_ckpt_tensor noname[] = {
        {.name = "", .dtype = STOKE_F32, .ndim = 1, .shape = {2}, .data = x}};
    CHECK_INT_EQ(stoke_ckpt_write(p, noname, 1, NULL, 0), STOKE_ERR_ARG);
    stoke_ckpt_tensor neg[] = {
        {.name = "n", .dtype = STOKE_F32, .ndim = 1, .shape = {-2}, .data = x}};
    CHECK_INT_EQ(stoke_ckpt_write(p, neg, 1, NULL, 0), STOKE_ERR_ARG);
    stoke_ckpt_kv meta[] = {{"k", "1"}, {"k", "2"}};
    CHECK_INT_EQ(stoke_ckpt_write(p, dup, 1, meta, 2), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "'k'");
    CHECK_INT_EQ(stoke_ckpt_write("/nonexistent-dir/x.safetensors", dup, 1, NULL, 0), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "/nonexistent-dir/x.safetensors");

    /* Past the file-size limit (SIGXFSZ ignored, as `stoke` runs): an error naming the
     * file and the limit; the previous checkpoint stays, nothing is left beside it. In
     * a child, whose limit dies with it. */
    const char *kept = tmp_path("kept.safetensors");
    CHECK_INT_EQ(stoke_ckpt_write(kept, dup, 1, NULL, 0), STOKE_OK);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl;
        getrlimit(RLIMIT_FSIZE, &rl);
        rl.rlim_cur = 4096;
        setrlimit(RLIMIT_FSIZE, &rl);
        static float big[4096];
        stoke_ckpt_tensor t[] = {
            {.name = "big", .dtype = STOKE_F32, .ndim = 1, .shape = {4096}, .data = big}};
        stoke_status s = stoke_ckpt_write(kept, t, 1, NULL, 0);
        CHECK_INT_EQ(s, STOKE_ERR_IO);
        CHECK_STR_CONTAINS(stoke_last_error(), "kept.safetensors: write failed after 4096 "
                                               "bytes: the file size limit (ulimit -f) of "
                                               "4096 bytes is reached");
        _exit(check_failures ? 1 : 0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "file-size limit child: status %#x", st);
    stoke_ckpt *c;
    CHECK_INT_EQ(stoke_ckpt_open(kept, &c), STOKE_OK);
    if (c) {
        CHECK(stoke_ckpt_find(c, "a") != NULL);
        stoke_ckpt_close(c);
    }
    CHECK_INT_EQ(remove_temporary_files(), 0);
}

/* A file of 8-byte length + header + `data` bytes of zeros. */
static stoke_status open_header(const char *header, size_t data, stoke_ckpt **c)
{
    size_t hl = strlen(header);
    size_t n = 8 + hl + data;
    unsigned char *buf = calloc(1, n);
    for (int k = 0; k < 8; k++)
        buf[k] = (unsigned char)((uint64_t)hl >> (8 * k));
    memcpy(buf + 8, header, hl);
    stoke_status s = stoke_ckpt_open_memory(buf, n, "mem.safetensors", c);
    free(buf);
    return s;
}

static void expect_bad(const char *header, size_t data, const char *needle)
{
    stoke_ckpt *c = NULL;
    stoke_status s = open_header(header, data, &c);
    CHECK_MSG(s == STOKE_ERR_FORMAT, "accepted: %s", header);
    CHECK(c == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "mem.safetensors");
    CHECK_STR_CONTAINS(stoke_last_error(), needle);
    stoke_ckpt_close(c);
}

static void test_reader_checks(void)
{
    stoke_ckpt *c = NULL;
    /* A valid minimal file first, so the failures below are the edits' fault. */
    CHECK_INT_EQ(
        open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &c),
        STOKE_OK);
    stoke_ckpt_close(c);
    CHECK_INT_EQ(open_header("{}", 0, &c), STOKE_OK);
    stoke_ckpt_close(c);

    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "need 12");
    expect_bad("{\"a\":{\"dtype\":\"F99\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "F99");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "cover 4");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "twice");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, "'k'");
    expect_bad("{\"__metadata__\":[]}", 0, "__metadata__");
    expect_bad("{\"a\":", 0, "valid JSON");
    expect_bad("[1,2]", 0, "JSON object");
    expect_bad("{} x", 0, "junk");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
               4, "dimensions");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
               "\"data_offsets\":[0,4]}}",
               4, "'a'");

    /* Header lengths beyond the file, and files too short for a length. */
    unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
    CHECK_INT_EQ(stoke_ckpt_open_memory(big, sizeof big, "mem.safetensors", &c), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "offset 0");
    CHECK_INT_EQ(stoke_ckpt_open_memory(big, 5, "mem.safetensors", &c), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "too short");

    CHECK_INT_EQ(stoke_ckpt_open(tmp_path("does-not-exist"), &c), STOKE_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(stoke_last_error(), "does-not-exist");

    /* Every truncation of a real file is refused, never read past its end. */
    const char *p = tmp_path("trunc.safetensors");
    CHECK_INT_EQ(write_fixture(p), STOKE_OK);
    FILE *f = fopen(p, "rb");
    unsigned char whole[4096];
    size_t n = f ? fread(whole, 1, sizeof whole, f) : 0;
    if (f)
        fclose(f);
    CHECK(n > 100 && n < sizeof whole);
    int refused = 0;
    for (size_t len = 0; len < n; len++) {
        if (stoke_ckpt_open_memory(whole, len, "mem.safetensors", &c) == STOKE_ERR_FORMAT)
            refused++;
        stoke_ckpt_close(c);
    }
    CHECK_INT_EQ(refused, (long long)n);
}

/* ---- SIGKILL while writing --------------------------------------------------------- */

enum { KILL_FLOATS = 1 << 20 }; /* 4 MB per checkpoint: a write takes a while */

/* Every element of generation g is the float g, and the metadata says g: a file that
 * mixes two generations, or is cut short, is detected. */
static void write_generation(const char *path, float *buf, long g)
{
    for (int i = 0; i < KILL_FLOATS; i++)
        buf[i] = (float)g;
    char gs[32];
    snprintf(gs, sizeof gs, "%ld", g);
    stoke_ckpt_tensor t[] = {
        {.name = "w1", .dtype = STOKE_F32, .ndim = 1, .shape = {KILL_FLOATS / 2}, .data = buf},
        {.name = "w2",
         .dtype = STOKE_F32,
         .ndim = 2,
         .shape = {2, KILL_FLOATS / 4},
         .data = buf + KILL_FLOATS / 2},
    };
    stoke_ckpt_kv meta[] = {{"generation", gs}};
    if (stoke_ckpt_write(path, t, 2, meta, 1) != STOKE_OK) {
        fprintf(stderr, "child: %s\n", stoke_last_error());
        _exit(3);
    }
}

static long check_generation(const char *path)
{
    stoke_ckpt *c;
    if (stoke_ckpt_open(path, &c) != STOKE_OK) {
        fprintf(stderr, "after SIGKILL: %s\n", stoke_last_error());
        return -1;
    }
    const char *gs = stoke_ckpt_meta(c, "generation");
    long g = gs ? atol(gs) : -1;
    const stoke_ckpt_tensor *w1 = stoke_ckpt_find(c, "w1"), *w2 = stoke_ckpt_find(c, "w2");
    bool ok = w1 && w2 && w1->nbytes == KILL_FLOATS / 2 * 4 && w2->nbytes == KILL_FLOATS / 2 * 4;
    for (int i = 0; ok && i < KILL_FLOATS / 2; i++)
        ok = ((const float *)w1->data)[i] == (float)g && ((const float *)w2->data)[i] == (float)g;
    stoke_ckpt_close(c);
    return ok ? g : -1;
}

static void test_sigkill(void)
{
    const char *p = tmp_path("killed.safetensors");
    float *buf = malloc(KILL_FLOATS * sizeof(float));
    write_generation(p, buf, 0);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    long last = 0;
    int rounds = 8, grew = 0;
    for (int r = 0; r < rounds; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (long g = last + 1;; g++)
                write_generation(p, buf, g);
        }
        CHECK(pid > 0);
        if (pid < 0)
            break;
        /* Random points within a few writes, including before the first finishes. */
        struct timespec ts = {0, (long)(rand() % 60000) * 1000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        long g = check_generation(p);
        CHECK_MSG(g >= last, "round %d: generation %ld after %ld", r, g, last);
        if (g > last)
            grew++;
        if (g >= 0)
            last = g;
        /* The killed child's temporary file may remain; it never replaces the target. */
        remove_temporary_files();
    }
    fprintf(stderr, "sigkill: %d rounds, final generation %ld (%d rounds advanced)\n", rounds, last,
            grew);
    free(buf);
}

static void cleanup(void)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            unlink(tmp_path(e->d_name));
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--fixture") == 0) {
        if (write_fixture(argv[2]) != STOKE_OK) {
            fprintf(stderr, "%s\n", stoke_last_error());
            return 1;
        }
        return 0;
    }
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/stoke-ckpt-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_write_errors();
    test_reader_checks();
    test_sigkill();
    cleanup();
    return CHECK_DONE();
}
