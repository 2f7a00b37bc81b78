/* check.h - the assertions of stoke's test executables. A failed check prints the
 * file, line and expression and the test executable exits 1 at the end; checks stay
 * on in every build type. */
#ifndef STOKE_CHECK_H
#define STOKE_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        check_count++;                                                               \
        if (!(cond)) {                                                               \
            check_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                         \
    do {                                                                             \
        check_count++;                                                               \
        if (!(cond)) {                                                               \
            check_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
        }                                                                            \
    } while (0)

#define CHECK_INT_EQ(a, b)                                                   \
    do {                                                                     \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);      \
        CHECK_MSG(check_a_ == check_b_, "%lld != %lld", check_a_, check_b_); \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                                   \
    do {                                                                                     \
        const char *check_a_ = (a), *check_b_ = (b);                                         \
        CHECK_MSG(check_a_ &&check_b_ &&strcmp(check_a_, check_b_) == 0, "\"%s\" != \"%s\"", \
                  check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");           \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                         \
    do {                                                                        \
        const char *check_h_ = (hay), *check_n_ = (needle);                     \
        CHECK_MSG(check_h_ &&strstr(check_h_, check_n_), "\"%s\" lacks \"%s\"", \
                  check_h_ ? check_h_ : "(null)", check_n_);                    \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                              \
    do {                                                                                   \
        double check_a_ = (double)(a), check_b_ = (double)(b);                             \
        CHECK_MSG(fabs(check_a_ - check_b_) <= (tol), "%g vs %g (tolerance %g)", check_a_, \
                  check_b_, (double)(tol));                                                \
    } while (0)

/* The exit status ctest counts as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt):
 * a check whose reference is missing must show as skipped, never as passed. */
#define CHECK_SKIPPED 77

/* Whether /usr/bin/python3 with torch is there for the cross-checks (CI installs it:
 * scripts/deps). */
static inline int check_have_torch(void)
{
    static int cached = -1;
    if (cached < 0)
        cached = access("/usr/bin/python3", X_OK) == 0 &&
                 system("/usr/bin/python3 -c 'import torch' 2>/dev/null") == 0;
    return cached;
}

/* A whole file read into malloc'd memory (*n its size); NULL if unreadable. */
static inline unsigned char *check_slurp(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = len > 0 ? (size_t)len : 0;
    return b;
}

/* Writes n bytes to path; a failure is a failed check. */
static inline void check_spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f && fwrite(b, 1, n, f) == n, "%s: cannot write", path);
    if (f)
        fclose(f);
}

/* Removes a test's temporary directory and everything in it. */
static inline void check_rm_rf(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Whether /usr/bin/python3 with Pillow is there (the resize references). */
static inline int check_have_pillow(void)
{
    return access("/usr/bin/python3", X_OK) == 0 &&
           system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") == 0;
}

/* A test executable with cases that need a reference which may be missing (torch, a
 * dataset) runs them only when its first argument names that part (ctest's
 * <name>_<part>: stoke_torch_test, stoke_part_test), everything else without an
 * argument, so the part can be skipped while the rest still runs and counts. */
static inline int check_part(int argc, char **argv, const char *part)
{
    return argc > 1 && strcmp(argv[1], part) == 0;
}

/* Ends main() of a torch part when torch is missing: says so, returns the skip code. */
#define CHECK_SKIP_NO_TORCH() \
    (fprintf(stderr, "skipped: /usr/bin/python3 with torch not found\n"), CHECK_SKIPPED)

/* In main(): with the argument "torch" (ctest's <name>_torch), runs the torch cases
 * and ends main(), skipped with the reason when torch is missing; otherwise falls
 * through to the other cases. */
#define CHECK_TORCH_PART(argc, argv, cases)    \
    do {                                       \
        if (check_part(argc, argv, "torch")) { \
            if (!check_have_torch())           \
                return CHECK_SKIP_NO_TORCH();  \
            cases();                           \
            return CHECK_DONE();               \
        }                                      \
    } while (0)

/* Ends main(): prints a summary and returns the exit status. */
#define CHECK_DONE()                                                         \
    (fprintf(stderr, "%d checks, %d failed\n", check_count, check_failures), \
     (check_failures == 0 && check_count > 0) ? 0 : 1)

#endif
