/* core.h - status codes, last-error messages, clocks, element types and shapes, and
 * small helpers shared by every stoke module. */
#ifndef STOKE_CORE_H
#define STOKE_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Checked against CMakeLists.txt's project() version at configure. */
#define STOKE_VERSION "0.1.0"

/* Every library call that can fail returns one of these. Values only grow at the
 * end, so they can be logged and compared across versions. */
typedef enum stoke_status {
    STOKE_OK = 0,
    STOKE_ERR_ARG,         /* bad argument or option value */
    STOKE_ERR_IO,          /* open/read/write failed (errno in the message) */
    STOKE_ERR_FORMAT,      /* malformed input file (file and offset in the message) */
    STOKE_ERR_NOMEM,       /* allocation failed */
    STOKE_ERR_UNAVAILABLE, /* a library, device or reading is not present */
    STOKE_ERR_SYSTEM,      /* a system call failed (fork, exec, signals, ...) */
    STOKE_ERR_NOTFOUND,    /* a named thing (process, file, device) does not exist */
    STOKE_ERR_TIMEOUT,     /* nothing arrived within the time asked; call again */
} stoke_status;

/* Short stable name of a status ("io", "format", ...). Never NULL. */
const char *stoke_status_name(stoke_status s);

/* Records the calling thread's last error message (printf-style) and returns `s`,
 * so library code can write `return stoke_fail(STOKE_ERR_IO, "%s: %s", path, ...)`.
 * The message is truncated to 1023 bytes. Can't fail. */
stoke_status stoke_fail(stoke_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The calling thread's last error message, or "" if none. Valid until the next
 * stoke_fail on the same thread. */
const char *stoke_last_error(void);

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC). */
uint64_t stoke_now_ns(void);

/* Wall clock in seconds since the Unix epoch, with sub-second precision. */
double stoke_wall_time(void);

/* Reads a whole small file (such as one under /proc or /sys) into buf, NUL-terminated.
 * Returns the number of bytes read, or -1 if it cannot be opened or read (errno is
 * left set; no last-error message is recorded: absent files are a normal answer). */
long stoke_read_file(const char *path, char *buf, size_t size);

/* Like stoke_read_file, then strips trailing whitespace. Returns -1 on failure. */
long stoke_read_line(const char *path, char *buf, size_t size);

/* Formats a byte count as "12.3 GB" (decimal units, as nvidia-smi and the seeds use)
 * into buf and returns buf. */
char *stoke_format_bytes(double bytes, char *buf, size_t size);

/* Formats a rate of floating-point operations as "332.8 GFLOP/s" into buf and returns
 * buf. */
char *stoke_format_flops(double flops, char *buf, size_t size);

/* Rounding conversions: n floats to IEEE half or bfloat16, round to nearest even
 * (NaN stays a quiet NaN, overflow becomes infinity, subnormals are rounded, not
 * flushed), through the CPU's instructions where it has them (F16C, AVX512-BF16) and
 * an exact scalar path otherwise; every path gives the same bits. Can't fail. */
void stoke_f32_to_f16(const float *in, uint16_t *out, size_t n);
void stoke_f32_to_bf16(const float *in, uint16_t *out, size_t n);
float stoke_f16_to_f32(uint16_t h);

/* ---- Element types and shapes -------------------------------------------------
 * Of datasets, transforms and model tensors alike: here so that nn and data share
 * them without nn depending on data. */

typedef enum stoke_dtype {
    STOKE_U8 = 0,
    STOKE_I8,
    STOKE_U16,
    STOKE_I16,
    STOKE_U32,
    STOKE_I32,
    STOKE_I64,
    STOKE_F16,
    STOKE_BF16,
    STOKE_F32,
    STOKE_F64,
    STOKE_DTYPE_COUNT
} stoke_dtype;

size_t stoke_dtype_size(stoke_dtype t);      /* bytes per element; 0 if invalid */
const char *stoke_dtype_name(stoke_dtype t); /* "uint8", "float32", ...; "?" if invalid */

#define STOKE_MAX_DIMS 8

/* The shape of ONE sample (no batch dimension). ndim 0 is a scalar. */
typedef struct stoke_shape {
    int ndim;
    int64_t dims[STOKE_MAX_DIMS];
} stoke_shape;

int64_t stoke_shape_elems(const stoke_shape *s); /* product of dims; 1 for a scalar */

/* Formats a shape as "(28, 28)" or "()" into buf and returns buf. */
char *stoke_shape_format(const stoke_shape *s, char *buf, size_t size);

/* ---- The CPU instruction-set cap (docs/testing.md, "CPUs other than this one") ----
 * One setting caps every CPU-dependent choice stoke makes: its own vector kernels, the
 * conversions above, the data transforms, oneDNN's kernels, and the machine
 * description (`stoke probe`, the CPU precision rule). The levels are oneDNN's, each
 * allowing everything below it. OpenBLAS picks its kernels when it is loaded, before
 * any of this runs: cap it with OPENBLAS_CORETYPE (Haswell, SkylakeX). */
typedef enum stoke_cpu_isa {
    STOKE_CPU_ISA_SSE41 = 0,        /* "sse41": up to SSE4.1; stoke's baseline kernels */
    STOKE_CPU_ISA_AVX2,             /* "avx2": + SSE4.2, AVX, AVX2, FMA, F16C */
    STOKE_CPU_ISA_AVX512_CORE,      /* "avx512_core": + AVX-512 F, CD, BW, DQ, VL */
    STOKE_CPU_ISA_AVX512_CORE_VNNI, /* "avx512_core_vnni": + AVX512-VNNI */
    STOKE_CPU_ISA_AVX512_CORE_BF16, /* "avx512_core_bf16": + AVX512-BF16 */
    STOKE_CPU_ISA_AVX512_CORE_AMX,  /* "avx512_core_amx": + AVX512-FP16, AMX */
    STOKE_CPU_ISA_ALL,              /* "all": no cap */
} stoke_cpu_isa;

/* The level named `name` (case-insensitive: "avx2", "AVX512_CORE", "all"). On an
 * unknown or NULL name: STOKE_ERR_ARG, "'<name>' is not a CPU ISA level (sse41, avx2,
 * ..., all)", and *out untouched. */
stoke_status stoke_cpu_isa_parse(const char *name, stoke_cpu_isa *out);

/* Lower-case name of a level ("avx512_core"); "unknown" outside the enum. */
const char *stoke_cpu_isa_name(stoke_cpu_isa isa);

/* The cap in force. It is fixed by the first call of this function or of anything
 * CPU-dependent in stoke (a kernel, a probe, a model): the value given to
 * stoke_set_max_cpu_isa before that, else the environment variable
 * STOKE_MAX_CPU_ISA (a level name; unset or empty means "all"). Thread-safe. On a bad
 * STOKE_MAX_CPU_ISA returns STOKE_ERR_ARG with a message naming the variable, its
 * value and the accepted values, every time it is asked; *out is then
 * STOKE_CPU_ISA_SSE41, the level the kernels (which cannot fail) run at meanwhile, and
 * every CPU-dependent call that returns a status (probe, model creation) fails with
 * the same message. */
stoke_status stoke_max_cpu_isa(stoke_cpu_isa *out);

/* Sets the cap, overriding STOKE_MAX_CPU_ISA (as dnnl_set_max_cpu_isa overrides
 * ONEDNN_MAX_CPU_ISA). Only before the cap is fixed (see above): afterwards it returns
 * STOKE_ERR_ARG naming the level in force, unless `isa` is that level. STOKE_ERR_ARG
 * for a value outside the enum. Thread-safe. */
stoke_status stoke_set_max_cpu_isa(stoke_cpu_isa isa);

#ifdef __cplusplus
}
#endif
#endif
