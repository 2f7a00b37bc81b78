/* npy.c - NPY files (format 1.0, 2.0, 3.0, either byte order, C order): an inputs file
 * and its targets file, read by offset (pread, not mapped: util_impl.h says why) and
 * byte-swapped on read when big-endian; scalar targets are read whole on open. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/dataset_impl.h"
#include "data/npy_impl.h"
#include "data/util_impl.h"

/* ---- the header, parsed by hand ---------------------------------------------------- */
/* No C library parses NPY headers (numpy's own parser is Python's ast.literal_eval),
 * and the dict is a fixed, tiny subset of Python literals: strings, True/False and
 * tuples of integers. */

typedef struct cursor {
    const unsigned char *p, *end;
    const unsigned char *base; /* the file's first byte: offsets are from here */
    const char *path;
} cursor;

static size_t off(const cursor *c) { return (size_t)(c->p - c->base); }

static stoke_status bad(const cursor *c, const char *what)
{
    return stoke_fail(STOKE_ERR_FORMAT, "%s: NPY header, offset %zu: %s", c->path, off(c), what);
}

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == (unsigned char)ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes (NPY keys and dtype strings never need them). */
static stoke_status parse_string(cursor *c, char *out, size_t size)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return bad(c, "expected a quoted string");
    unsigned char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || *c->p == '\n')
            return bad(c, "unexpected character in a string");
        if (n + 1 >= size)
            return bad(c, "string too long");
        out[n++] = (char)*c->p++;
    }
    if (c->p >= c->end)
        return bad(c, "unterminated string");
    c->p++;
    out[n] = '\0';
    return STOKE_OK;
}

static bool match_word(cursor *c, const char *w)
{
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

static stoke_status parse_bool(cursor *c, bool *v)
{
    if (match_word(c, "True"))
        *v = true;
    else if (match_word(c, "False"))
        *v = false;
    else
        return bad(c, "'fortran_order' must be True or False");
    return STOKE_OK;
}

static stoke_status parse_shape(cursor *c, stoke_npy_header *h)
{
    if (!eat(c, '('))
        return bad(c, "'shape' must be a tuple such as (60000, 28, 28), (5,) or ()");
    h->ndim = 0;
    bool comma = false; /* after the last dimension */
    for (;;) {
        if (eat(c, ')'))
            break;
        skip_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return bad(c, "expected a dimension (a non-negative integer) or ')'");
        if (h->ndim == STOKE_NPY_MAX_NDIM)
            return bad(c, "too many dimensions (at most 9)");
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return bad(c, "dimension too large");
            v = v * 10 + (*c->p++ - '0');
        }
        if (c->p < c->end && *c->p == 'L') /* Python 2's long literal */
            c->p++;
        h->shape[h->ndim++] = v;
        comma = eat(c, ',');
        if (comma)
            continue;
        if (eat(c, ')'))
            break;
        return bad(c, "expected ',' or ')' in 'shape'");
    }
    /* (5) is the number 5, not a tuple: Python needs (5,). */
    if (h->ndim == 1 && !comma)
        return bad(c, "'shape' (n) is not a tuple; numpy writes (n,)");
    return STOKE_OK;
}

/* '<f4' etc. bfloat16 has no numpy descr, so NPY never holds it. */
static stoke_status parse_descr(cursor *c, const char *s, stoke_npy_header *h)
{
    char msg[160];
    size_t n = strlen(s);
    char order = n ? s[0] : 0;
    bool ok = n == 3 && (order == '<' || order == '>' || order == '|' || order == '=');
    if (ok) {
        char kind = s[1], size = s[2];
        static const struct {
            char kind, size;
            stoke_dtype t;
        } table[] = {
            {'b', '1', STOKE_U8},  {'u', '1', STOKE_U8},  {'i', '1', STOKE_I8},
            {'u', '2', STOKE_U16}, {'i', '2', STOKE_I16}, {'u', '4', STOKE_U32},
            {'i', '4', STOKE_I32}, {'i', '8', STOKE_I64}, {'f', '2', STOKE_F16},
            {'f', '4', STOKE_F32}, {'f', '8', STOKE_F64},
        };
        ok = false;
        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
            if (table[i].kind == kind && table[i].size == size) {
                h->dtype = table[i].t;
                ok = true;
            }
        }
        if (ok && order == '|' && size != '1')
            ok = false; /* '|' means "no byte order", true only of single bytes */
    }
    if (!ok) {
        snprintf(msg, sizeof msg,
                 "unsupported dtype '%.40s' (stoke reads u1 b1 i1 u2 i2 u4 "
                 "i4 i8 f2 f4 f8)",
                 s);
        return bad(c, msg);
    }
    bool file_little = order == '<' || (order == '=' && stoke_host_little());
    h->swap = order != '|' && file_little != stoke_host_little();
    return STOKE_OK;
}

stoke_status stoke_npy_parse_header(const unsigned char *buf, size_t n, const char *path,
                                    stoke_npy_header *h)
{
    memset(h, 0, sizeof *h);
    cursor c = {buf, buf + n, buf, path};
    if (n < 6 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return bad(&c, "not an NPY file (the magic \\x93NUMPY is missing)");
    if (n < 10) {
        c.p = buf + n;
        return bad(&c, "truncated preamble");
    }
    h->major = buf[6];
    h->minor = buf[7];
    size_t start, hlen;
    if (h->major == 1 && h->minor == 0) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        start = 10;
    } else if ((h->major == 2 || h->major == 3) && h->minor == 0) {
        if (n < 12) {
            c.p = buf + n;
            return bad(&c, "truncated preamble");
        }
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        start = 12;
    } else {
        char msg[96];
        c.p = buf + 6;
        snprintf(msg, sizeof msg, "format version %d.%d (stoke reads 1.0, 2.0 and 3.0)", h->major,
                 h->minor);
        return bad(&c, msg);
    }
    if (hlen > n - start) {
        char msg[128];
        c.p = buf + 8;
        snprintf(msg, sizeof msg,
                 "header length %zu runs past the end of the file (%zu "
                 "bytes)",
                 hlen, n);
        return bad(&c, msg);
    }
    c.p = buf + start;
    c.end = buf + start + hlen;
    h->data_offset = start + hlen;

    bool have_descr = false, have_fortran = false, have_shape = false, fortran = false;
    if (!eat(&c, '{'))
        return bad(&c, "the header is not a dict: expected '{'");
    for (;;) {
        if (eat(&c, '}'))
            break;
        char key[32];
        const unsigned char *key_at = c.p;
        stoke_status s = parse_string(&c, key, sizeof key);
        if (s != STOKE_OK)
            return s;
        if (!eat(&c, ':'))
            return bad(&c, "expected ':' after a key");
        bool *seen = strcmp(key, "descr") == 0           ? &have_descr
                     : strcmp(key, "fortran_order") == 0 ? &have_fortran
                     : strcmp(key, "shape") == 0         ? &have_shape
                                                         : NULL;
        if (!seen || *seen) {
            char msg[96];
            c.p = key_at;
            snprintf(msg, sizeof msg,
                     "%s key '%s' (NPY has 'descr', 'fortran_order' and "
                     "'shape')",
                     seen ? "repeated" : "unknown", key);
            return bad(&c, msg);
        }
        *seen = true;
        if (seen == &have_descr) {
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return bad(&c, "structured dtypes (a list in 'descr') are not supported");
            char d[48];
            const unsigned char *at = c.p;
            s = parse_string(&c, d, sizeof d);
            if (s == STOKE_OK) {
                cursor dc = c;
                dc.p = at;
                s = parse_descr(&dc, d, h);
            }
        } else if (seen == &have_fortran) {
            skip_ws(&c);
            const unsigned char *at = c.p;
            s = parse_bool(&c, &fortran);
            if (s == STOKE_OK && fortran) {
                c.p = at;
                s = bad(&c, "Fortran order is not supported (save the array in C order: "
                            "numpy.ascontiguousarray)");
            }
        } else {
            s = parse_shape(&c, h);
        }
        if (s != STOKE_OK)
            return s;
        if (eat(&c, ','))
            continue;
        if (eat(&c, '}'))
            break;
        return bad(&c, "expected ',' or '}'");
    }
    skip_ws(&c);
    if (c.p != c.end)
        return bad(&c, "unexpected text after the header dict");
    if (!have_descr || !have_fortran || !have_shape) {
        c.p = buf + start;
        return bad(&c, !have_descr     ? "the header has no 'descr'"
                       : !have_fortran ? "the header has no 'fortran_order'"
                                       : "the header has no 'shape'");
    }
    uint64_t total = stoke_dtype_size(h->dtype);
    for (int k = 0; k < h->ndim; k++) {
        if (__builtin_mul_overflow(total, (uint64_t)h->shape[k], &total) || total > SIZE_MAX / 4) {
            c.p = buf + start;
            return bad(&c, "'shape' describes more bytes than this machine can address");
        }
    }
    h->data_bytes = (size_t)total;
    return STOKE_OK;
}

/* ---- the dataset ------------------------------------------------------------------- */

typedef struct npy_file {
    char path[1024];
    stoke_rfile file;
    stoke_npy_header h;
    unsigned char *all; /* scalar targets: all of them, read and checked on open */
} npy_file;

typedef struct npy_impl {
    npy_file inputs, targets;
    bool has_targets;
} npy_impl;

/* numpy writes headers of a few hundred bytes (and reads none over 10000 by default):
 * a larger one is refused before it is read into memory. */
#define NPY_HEADER_MAX ((size_t)1 << 20)

static void npy_file_free(npy_file *f)
{
    stoke_rfile_close(&f->file);
    free(f->all);
    f->all = NULL;
}

/* Opens and checks one file: header, and data size == what the header describes. */
static stoke_status npy_load(const char *path, npy_file *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    stoke_status s = stoke_rfile_open(path, &f->file);
    if (s != STOKE_OK)
        return s;
    uint64_t size = f->file.size;
    /* The preamble gives the header's length: read that much (the parser then sees the
     * whole header), or the whole file if it is shorter (it reports where it ends). */
    unsigned char pre[12];
    size_t n = size < sizeof pre ? (size_t)size : sizeof pre, want = n;
    s = stoke_rfile_read(&f->file, path, -1, pre, n, 0);
    size_t start = n >= 10 && memcmp(pre, "\x93NUMPY", 6) == 0 && pre[7] == 0
                       ? pre[6] == 1                               ? 10
                         : (pre[6] == 2 || pre[6] == 3) && n == 12 ? 12
                                                                   : 0
                       : 0;
    if (s == STOKE_OK && start) { /* else the parser names what is wrong in pre[] */
        size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
        if (start == 12)
            hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        if (start + hlen > NPY_HEADER_MAX)
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s: NPY header, offset 8: header length %zu (stoke reads headers "
                           "up to %zu bytes; numpy writes a few hundred)",
                           path, hlen, NPY_HEADER_MAX - start);
        want = start + hlen < size ? start + hlen : (size_t)size;
    }
    unsigned char *head = s == STOKE_OK ? malloc(want ? want : 1) : NULL;
    if (s == STOKE_OK && !head)
        s = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory for the header", path);
    if (s == STOKE_OK)
        s = stoke_rfile_read(&f->file, path, -1, head, want, 0);
    if (s == STOKE_OK)
        s = stoke_npy_parse_header(head, want, path, &f->h);
    free(head);
    if (s == STOKE_OK && size - f->h.data_offset != f->h.data_bytes)
        s = stoke_fail(STOKE_ERR_FORMAT,
                       "%s: %s data: the header describes %zu bytes "
                       "from offset %zu, the file holds %" PRIu64,
                       path, size - f->h.data_offset < f->h.data_bytes ? "truncated" : "oversized",
                       f->h.data_bytes, f->h.data_offset, size - f->h.data_offset);
    if (s == STOKE_OK && f->h.ndim == 0)
        s = stoke_fail(STOKE_ERR_FORMAT,
                       "%s: offset %zu: shape () is a single value with no "
                       "sample axis; a dataset needs at least (n,)",
                       path, f->h.data_offset);
    for (int k = 1; s == STOKE_OK && k < f->h.ndim; k++)
        if (f->h.shape[k] == 0)
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s: 'shape' dimension %d is 0: samples would "
                           "be empty",
                           path, k);
    if (s != STOKE_OK)
        npy_file_free(f);
    return s;
}

/* Sample i's `bytes` of f into out, in the host's order. */
static stoke_status npy_sample(const npy_file *f, int64_t i, size_t bytes, stoke_dtype t, void *out)
{
    size_t es = stoke_dtype_size(t);
    if (f->all) {
        stoke_copy_swapped(out, f->all + (size_t)i * bytes, bytes / es, es, f->h.swap);
        return STOKE_OK;
    }
    stoke_status s =
        stoke_rfile_read(&f->file, f->path, i, out, bytes, f->h.data_offset + (uint64_t)i * bytes);
    if (s == STOKE_OK && f->h.swap)
        stoke_swap_in_place(out, bytes / es, es);
    return s;
}

static stoke_status npy_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    const npy_impl *m = d->impl;
    const stoke_dataset_info *f = &d->info;
    stoke_status s = npy_sample(&m->inputs, i, f->input_bytes, f->input_dtype, input);
    if (s == STOKE_OK && target && m->has_targets)
        s = npy_sample(&m->targets, i, f->target_bytes, f->target_dtype, target);
    return s;
}

static void npy_close(stoke_dataset *d)
{
    npy_impl *m = d->impl;
    if (!m)
        return;
    npy_file_free(&m->inputs);
    npy_file_free(&m->targets);
    free(m);
    d->impl = NULL;
}

static const stoke_dataset_vt npy_vt = {.read = npy_read, .close = npy_close};

/* The targets file beside an inputs file, by name (docs/data.md): the stem (the file
 * name without ".npy") x -> y, X -> y or Y, inputs -> targets, x_* / X_* -> y_* / Y_*,
 * *_x / *_X -> *_y / *_Y, inputs_* -> targets_*, *_inputs -> *_targets.
 * Returns the first candidate that exists. */
static bool targets_beside(const char *path, char *out, size_t size)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dirlen = (size_t)(base - path), blen = strlen(base);
    if (blen < 5 || strcmp(base + blen - 4, ".npy") != 0)
        return false;
    int sl = (int)(blen - 4); /* stem length */
    char cand[8][300];
    int n = 0;
#define CAND(...) snprintf(cand[n++], sizeof cand[0], __VA_ARGS__)
    if (sl == 1 && (base[0] == 'x' || base[0] == 'X')) {
        CAND("y");
        if (base[0] == 'X')
            CAND("Y");
    }
    if (sl == 6 && memcmp(base, "inputs", 6) == 0)
        CAND("targets");
    if (sl > 2 && (base[0] == 'x' || base[0] == 'X') && base[1] == '_') {
        CAND("y_%.*s", sl - 2, base + 2);
        if (base[0] == 'X')
            CAND("Y_%.*s", sl - 2, base + 2);
    }
    if (sl > 2 && base[sl - 2] == '_' && (base[sl - 1] == 'x' || base[sl - 1] == 'X')) {
        CAND("%.*s_y", sl - 2, base);
        if (base[sl - 1] == 'X')
            CAND("%.*s_Y", sl - 2, base);
    }
    if (sl > 7 && memcmp(base, "inputs_", 7) == 0)
        CAND("targets_%.*s", sl - 7, base + 7);
    if (sl > 7 && memcmp(base + sl - 7, "_inputs", 7) == 0)
        CAND("%.*s_targets", sl - 7, base);
#undef CAND
    for (int i = 0; i < n; i++) {
        struct stat st;
        if ((size_t)snprintf(out, size, "%.*s%s.npy", (int)dirlen, path, cand[i]) < size &&
            stat(out, &st) == 0)
            return true;
    }
    return false;
}

stoke_status stoke_npy_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o)
{
    char tpath[1400];
    bool want_targets;
    if (o && o->targets_path) {
        snprintf(tpath, sizeof tpath, "%s", o->targets_path);
        want_targets = true;
    } else {
        want_targets = targets_beside(path, tpath, sizeof tpath);
    }
    npy_impl *m = calloc(1, sizeof *m);
    if (!m)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
    m->inputs.file.fd = m->targets.file.fd = -1;
    d->impl = m;
    d->vt = &npy_vt;
    stoke_status s = npy_load(path, &m->inputs);
    if (s == STOKE_OK && want_targets) {
        s = npy_load(tpath, &m->targets);
        m->has_targets = s == STOKE_OK;
    }
    if (s != STOKE_OK) {
        npy_close(d);
        return s;
    }
    stoke_dataset_info *f = &d->info;
    snprintf(f->format, sizeof f->format, "npy");
    const stoke_npy_header *ih = &m->inputs.h;
    f->count = ih->shape[0];
    f->input_dtype = ih->dtype;
    f->input_shape.ndim = ih->ndim - 1;
    for (int k = 1; k < ih->ndim; k++)
        f->input_shape.dims[k - 1] = ih->shape[k];
    f->input_bytes = (size_t)stoke_shape_elems(&f->input_shape) * stoke_dtype_size(ih->dtype);
    if (!m->has_targets)
        return STOKE_OK;
    const stoke_npy_header *th = &m->targets.h;
    if (th->shape[0] != ih->shape[0]) {
        s = stoke_fail(STOKE_ERR_FORMAT,
                       "%s holds %" PRId64 " samples but %s holds %" PRId64 " targets", path,
                       ih->shape[0], tpath, th->shape[0]);
        npy_close(d);
        return s;
    }
    f->target_dtype = th->dtype;
    f->target_shape.ndim = th->ndim - 1;
    for (int k = 1; k < th->ndim; k++)
        f->target_shape.dims[k - 1] = th->shape[k];
    f->target_bytes = (size_t)stoke_shape_elems(&f->target_shape) * stoke_dtype_size(th->dtype);
    if (th->ndim > 1) {
        f->target_kind = STOKE_TARGET_VECTOR;
        return STOKE_OK;
    }
    /* Scalar targets are held in memory: their checks below stay true whatever happens
     * to the file later. */
    npy_file *tf = &m->targets;
    tf->all = malloc(th->data_bytes ? th->data_bytes : 1);
    s = tf->all ? stoke_rfile_read(&tf->file, tpath, -1, tf->all, th->data_bytes, th->data_offset)
                : stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory for %zu bytes of targets", tpath,
                             th->data_bytes);
    if (s == STOKE_OK)
        s = stoke_scalar_targets(tpath, tf->all, f->count, th->dtype, th->swap, o && o->regression,
                                 &f->target_kind, &f->num_classes);
    if (s == STOKE_OK)
        stoke_rfile_close(&tf->file);
    else
        npy_close(d);
    return s;
}
