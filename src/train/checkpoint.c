/* checkpoint.c - safetensors checkpoints: an atomic writer and a reader that checks the
 * whole file on open (header bounds, JSON, dtypes, shapes, offsets tiling the data). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/regular.h"
#include "core/tmpfile.h"
#include "stoke/train.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this writer copies host memory as it is"
#endif

/* The reference implementation refuses headers above 100 MB; so do we, so a corrupt
 * length cannot make us allocate gigabytes. */
#define MAX_HEADER_BYTES (100u * 1000u * 1000u)
/* Offsets are JSON numbers; cJSON keeps them as doubles, exact up to 2^53. */
#define MAX_EXACT_JSON_INT 9007199254740992.0

static const struct {
    stoke_dtype t;
    const char *name;
} dtype_names[] = {
    {STOKE_U8, "U8"},     {STOKE_I8, "I8"},   {STOKE_U16, "U16"}, {STOKE_I16, "I16"},
    {STOKE_U32, "U32"},   {STOKE_I32, "I32"}, {STOKE_I64, "I64"}, {STOKE_F16, "F16"},
    {STOKE_BF16, "BF16"}, {STOKE_F32, "F32"}, {STOKE_F64, "F64"},
};
#define N_DTYPES (sizeof dtype_names / sizeof dtype_names[0])

const char *stoke_ckpt_dtype_name(stoke_dtype t)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtype_names[i].t == t)
            return dtype_names[i].name;
    return "?";
}

bool stoke_ckpt_dtype_parse(const char *name, stoke_dtype *out)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(dtype_names[i].name, name) == 0) {
            *out = dtype_names[i].t;
            return true;
        }
    return false;
}

/* Bytes of a tensor, or false on a negative dim or an overflow of size_t. */
static bool tensor_bytes(stoke_dtype t, int ndim, const int64_t *shape, size_t *out)
{
    size_t n = stoke_dtype_size(t);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return false;
        if (shape[d] != 0 && n > SIZE_MAX / (uint64_t)shape[d])
            return false;
        n *= (size_t)shape[d];
    }
    *out = n;
    return true;
}

/* ---- Writer --------------------------------------------------------------------- */

/* The JSON header, padded with spaces so the data starts 8-byte aligned (as the
 * reference writer does). Returns NULL with the error recorded. */
static char *build_header(const char *path, const stoke_ckpt_tensor *t, size_t nt,
                          const stoke_ckpt_kv *meta, size_t nmeta, size_t *hlen, size_t *data_bytes,
                          stoke_status *status)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        goto nomem;
    if (nmeta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m)
            goto nomem;
        for (size_t i = 0; i < nmeta; i++) {
            if (!meta[i].key || !meta[i].value) {
                cJSON_Delete(root);
                *status = stoke_fail(STOKE_ERR_ARG, "%s: metadata entry %zu has no key or value",
                                     path, i);
                return NULL;
            }
            if (cJSON_GetObjectItemCaseSensitive(m, meta[i].key)) {
                cJSON_Delete(root);
                *status = stoke_fail(STOKE_ERR_ARG, "%s: metadata key '%s' given twice", path,
                                     meta[i].key);
                return NULL;
            }
            if (!cJSON_AddStringToObject(m, meta[i].key, meta[i].value))
                goto nomem;
        }
    }
    size_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        const char *name = t[i].name;
        size_t nb = 0;
        const char *why = NULL;
        if (!name || !*name)
            why = "has no name";
        else if (strcmp(name, "__metadata__") == 0)
            why = "is named __metadata__";
        else if (cJSON_GetObjectItemCaseSensitive(root, name))
            why = "is given twice";
        else if (stoke_dtype_size(t[i].dtype) == 0 || t[i].dtype == STOKE_DTYPE_COUNT)
            why = "has an invalid dtype";
        else if (t[i].ndim < 0 || t[i].ndim > STOKE_MAX_DIMS)
            why = "has an invalid number of dimensions";
        else if (!tensor_bytes(t[i].dtype, t[i].ndim, t[i].shape, &nb))
            why = "has a negative or overflowing shape";
        else if (nb > 0 && !t[i].data)
            why = "has no data";
        if (why) {
            cJSON_Delete(root);
            *status = stoke_fail(STOKE_ERR_ARG, "%s: tensor %zu ('%s') %s", path, i,
                                 name ? name : "", why);
            return NULL;
        }
        cJSON *e = cJSON_AddObjectToObject(root, name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", stoke_ckpt_dtype_name(t[i].dtype)))
            goto nomem;
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        if (!shape || !offs)
            goto nomem;
        for (int d = 0; d < t[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    char *json = stoke_json_print(root, false);
    cJSON_Delete(root);
    if (!json)
        goto nomem;
    size_t n = strlen(json);
    size_t padded = (n + 7) & ~(size_t)7;
    char *h = realloc(json, padded + 1);
    if (!h) {
        free(json);
        goto nomem;
    }
    memset(h + n, ' ', padded - n);
    h[padded] = '\0';
    *hlen = padded;
    *data_bytes = off;
    return h;
nomem:
    cJSON_Delete(root);
    *status = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory building the header", path);
    return NULL;
}

stoke_status stoke_ckpt_write(const char *path, const stoke_ckpt_tensor *tensors, size_t ntensors,
                              const stoke_ckpt_kv *meta, size_t nmeta)
{
    if (!path || !*path || (ntensors > 0 && !tensors) || (nmeta > 0 && !meta))
        return stoke_fail(STOKE_ERR_ARG, "checkpoint write: no path or no tensors");
    size_t hlen, data_bytes;
    stoke_status hs = STOKE_OK;
    char *header = build_header(path, tensors, ntensors, meta, nmeta, &hlen, &data_bytes, &hs);
    if (!header)
        return hs;
    /* A failure or a signal mid-write leaves the previous checkpoint and no temporary
     * file (core/tmpfile.h). */
    stoke_tmpfile out;
    stoke_status s = stoke_tmpfile_open(&out, path);
    if (s != STOKE_OK) {
        free(header);
        return s;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    s = stoke_tmpfile_write(&out, len8, 8);
    if (s == STOKE_OK)
        s = stoke_tmpfile_write(&out, header, hlen);
    for (size_t i = 0; s == STOKE_OK && i < ntensors; i++) {
        size_t nb = 0;
        tensor_bytes(tensors[i].dtype, tensors[i].ndim, tensors[i].shape, &nb);
        if (nb > 0)
            s = stoke_tmpfile_write(&out, tensors[i].data, nb);
    }
    free(header);
    (void)data_bytes;
    return s == STOKE_OK ? stoke_tmpfile_commit(&out) : s;
}

/* ---- Reader --------------------------------------------------------------------- */

struct stoke_ckpt {
    char *path;
    unsigned char *buf; /* the whole file */
    size_t size;
    size_t data_start; /* 8 + header length */
    size_t n;
    stoke_ckpt_tensor *t; /* sorted by offset; names point into `names` */
    char *names;
    size_t nmeta;
    stoke_ckpt_kv *meta;
    char *meta_text;
};

void stoke_ckpt_close(stoke_ckpt *c)
{
    if (!c)
        return;
    free(c->path);
    free(c->buf);
    free(c->t);
    free(c->names);
    free(c->meta);
    free(c->meta_text);
    free(c);
}

size_t stoke_ckpt_count(const stoke_ckpt *c) { return c->n; }
const stoke_ckpt_tensor *stoke_ckpt_tensor_at(const stoke_ckpt *c, size_t i)
{
    return i < c->n ? &c->t[i] : NULL;
}
size_t stoke_ckpt_meta_count(const stoke_ckpt *c) { return c->nmeta; }
const stoke_ckpt_kv *stoke_ckpt_meta_at(const stoke_ckpt *c, size_t i)
{
    return i < c->nmeta ? &c->meta[i] : NULL;
}
const char *stoke_ckpt_path(const stoke_ckpt *c) { return c->path; }

const stoke_ckpt_tensor *stoke_ckpt_find(const stoke_ckpt *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->t[i].name, name) == 0)
            return &c->t[i];
    return NULL;
}

const char *stoke_ckpt_meta(const stoke_ckpt *c, const char *key)
{
    for (size_t i = 0; i < c->nmeta; i++)
        if (strcmp(c->meta[i].key, key) == 0)
            return c->meta[i].value;
    return NULL;
}

/* A JSON number that is a whole number in [0, 2^53]. */
static bool json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= MAX_EXACT_JSON_INT) || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

typedef struct entry {
    const cJSON *item;
    size_t idx; /* in header order, into the unsorted tensors */
    uint64_t begin, end;
} entry;

static int by_begin(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Checks one tensor entry and fills *t (name excluded) and *e. */
static stoke_status parse_entry(const char *file, const cJSON *item, uint64_t data_size,
                                size_t data_start, stoke_ckpt_tensor *t, entry *e)
{
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return stoke_fail(STOKE_ERR_FORMAT, "%s: tensor '%s': entry is not an object", file, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !stoke_ckpt_dtype_parse(dt->valuestring, &t->dtype))
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: tensor '%s': dtype %s%s%s is missing or "
                          "not supported",
                          file, name, cJSON_IsString(dt) ? "'" : "",
                          cJSON_IsString(dt) ? dt->valuestring : "", cJSON_IsString(dt) ? "'" : "");
    if (!cJSON_IsArray(shape))
        return stoke_fail(STOKE_ERR_FORMAT, "%s: tensor '%s': shape is missing or not an array",
                          file, name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > STOKE_MAX_DIMS)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: tensor '%s': %d dimensions (at most %d)", file,
                          name, nd, STOKE_MAX_DIMS);
    t->ndim = nd;
    int d = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, shape)
    {
        uint64_t x;
        if (!json_uint(v, &x) || x > INT64_MAX)
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: tensor '%s': shape[%d] is not a "
                              "non-negative integer",
                              file, name, d);
        t->shape[d++] = (int64_t)x;
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_uint(cJSON_GetArrayItem(offs, 0), &e->begin) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), &e->end))
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: tensor '%s': data_offsets is not a pair of "
                          "non-negative integers",
                          file, name);
    if (e->begin > e->end || e->end > data_size)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                          ") outside the %" PRIu64 " data bytes (file offset %" PRIu64 ")",
                          file, name, e->begin, e->end, data_size, (uint64_t)data_start + e->begin);
    size_t nb = 0;
    if (!tensor_bytes(t->dtype, t->ndim, t->shape, &nb) || nb != e->end - e->begin)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: tensor '%s': %" PRIu64 " bytes at file "
                          "offset %" PRIu64 ", but its dtype and shape need %zu",
                          file, name, e->end - e->begin, (uint64_t)data_start + e->begin, nb);
    t->nbytes = nb;
    e->item = item;
    return STOKE_OK;
}

static stoke_status parse(stoke_ckpt *c)
{
    const char *file = c->path;
    if (c->size < 8)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: %zu bytes, too short for the 8-byte header "
                          "length",
                          file, c->size);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)c->buf[i] << (8 * i);
    if (hlen > MAX_HEADER_BYTES || hlen > c->size - 8)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: offset 0: header length %" PRIu64 " exceeds "
                          "the file (%zu bytes) or the 100 MB limit: not a safetensors file?",
                          file, hlen, c->size);
    if (hlen < 2 || c->buf[8] != '{')
        return stoke_fail(STOKE_ERR_FORMAT, "%s: offset 8: the header is not a JSON object", file);
    c->data_start = 8 + (size_t)hlen;
    uint64_t data_size = c->size - c->data_start;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)c->buf + 8, (size_t)hlen, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at ? (size_t)(at - (const char *)c->buf) : 8;
        return stoke_fail(STOKE_ERR_FORMAT, "%s: offset %zu: the header is not valid JSON", file,
                          off);
    }
    /* Only padding may follow the object inside the header. */
    for (const char *p = end; p < (const char *)c->buf + 8 + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
            cJSON_Delete(root);
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: offset %zu: junk after the header's JSON "
                              "object",
                              file, (size_t)(p - (const char *)c->buf));
        }
    stoke_status s = STOKE_OK;
    if (!cJSON_IsObject(root)) {
        s = stoke_fail(STOKE_ERR_FORMAT, "%s: offset 8: the header is not a JSON object", file);
        goto out;
    }
    size_t n = 0, names_len = 0, nmeta = 0, meta_len = 0;
    const cJSON *item;
    const cJSON *meta = NULL;
    cJSON_ArrayForEach(item, root)
    {
        if (!item->string) {
            s = stoke_fail(STOKE_ERR_FORMAT, "%s: a header entry has no name", file);
            goto out;
        }
        /* cJSON keeps duplicate keys; a reader that keeps the last one would see a
         * different file, so duplicates are an error. */
        for (const cJSON *o = root->child; o != item; o = o->next)
            if (strcmp(o->string, item->string) == 0) {
                s = stoke_fail(STOKE_ERR_FORMAT, "%s: header entry '%s' appears twice", file,
                               item->string);
                goto out;
            }
        if (strcmp(item->string, "__metadata__") == 0) {
            meta = item;
            continue;
        }
        if (!*item->string) {
            s = stoke_fail(STOKE_ERR_FORMAT, "%s: a tensor has an empty name", file);
            goto out;
        }
        n++;
        names_len += strlen(item->string) + 1;
    }
    if (meta) {
        if (!cJSON_IsObject(meta)) {
            s = stoke_fail(STOKE_ERR_FORMAT, "%s: __metadata__ is not an object", file);
            goto out;
        }
        const cJSON *kv;
        cJSON_ArrayForEach(kv, meta)
        {
            if (!kv->string || !cJSON_IsString(kv)) {
                s = stoke_fail(STOKE_ERR_FORMAT, "%s: __metadata__ entry '%s' is not a string",
                               file, kv->string ? kv->string : "");
                goto out;
            }
            for (const cJSON *o = meta->child; o != kv; o = o->next)
                if (strcmp(o->string, kv->string) == 0) {
                    s = stoke_fail(STOKE_ERR_FORMAT, "%s: __metadata__ key '%s' appears twice",
                                   file, kv->string);
                    goto out;
                }
            nmeta++;
            meta_len += strlen(kv->string) + strlen(kv->valuestring) + 2;
        }
    }
    c->t = calloc(n ? n : 1, sizeof *c->t);
    entry *e = calloc(n ? n : 1, sizeof *e);
    c->names = malloc(names_len + 1);
    c->meta = calloc(nmeta ? nmeta : 1, sizeof *c->meta);
    c->meta_text = malloc(meta_len + 1);
    if (!c->t || !e || !c->names || !c->meta || !c->meta_text) {
        free(e);
        s = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory reading the header", file);
        goto out;
    }
    size_t i = 0;
    cJSON_ArrayForEach(item, root)
    {
        if (item == meta)
            continue;
        s = parse_entry(file, item, data_size, c->data_start, &c->t[i], &e[i]);
        e[i].idx = i;
        if (s != STOKE_OK) {
            free(e);
            goto out;
        }
        i++;
    }
    qsort(e, n, sizeof *e, by_begin);
    /* Sorted by offset, each tensor must start where the previous one ended: no
     * overlaps, no holes, and the last one ends at the end of the file. */
    uint64_t at = 0;
    for (i = 0; i < n; i++) {
        if (e[i].begin != at) {
            s = stoke_fail(
                STOKE_ERR_FORMAT,
                "%s: tensor '%s': starts at data offset %" PRIu64 " (file offset %" PRIu64
                ") but the previous tensor ends at %" PRIu64 ": %s",
                file, e[i].item->string, e[i].begin, (uint64_t)c->data_start + e[i].begin, at,
                e[i].begin < at ? "overlap" : "hole");
            free(e);
            goto out;
        }
        at = e[i].end;
    }
    if (at != data_size) {
        s = stoke_fail(STOKE_ERR_FORMAT,
                       "%s: the tensors cover %" PRIu64 " data bytes but the "
                       "file has %" PRIu64 " after its header (file offset %" PRIu64 ")",
                       file, at, data_size, (uint64_t)c->data_start + at);
        free(e);
        goto out;
    }
    /* Rebuild the tensors in offset order with names copied out of the JSON. */
    stoke_ckpt_tensor *sorted = calloc(n ? n : 1, sizeof *sorted);
    if (!sorted) {
        free(e);
        s = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", file);
        goto out;
    }
    char *np = c->names;
    for (i = 0; i < n; i++) {
        sorted[i] = c->t[e[i].idx];
        size_t len = strlen(e[i].item->string) + 1;
        memcpy(np, e[i].item->string, len);
        sorted[i].name = np;
        np += len;
        sorted[i].data = c->buf + c->data_start + e[i].begin;
    }
    free(c->t);
    free(e);
    c->t = sorted;
    c->n = n;
    char *mp = c->meta_text;
    if (meta) {
        const cJSON *kv;
        size_t j = 0;
        cJSON_ArrayForEach(kv, meta)
        {
            size_t kl = strlen(kv->string) + 1, vl = strlen(kv->valuestring) + 1;
            memcpy(mp, kv->string, kl);
            c->meta[j].key = mp;
            mp += kl;
            memcpy(mp, kv->valuestring, vl);
            c->meta[j].value = mp;
            mp += vl;
            j++;
        }
        c->nmeta = j;
    }
out:
    cJSON_Delete(root);
    return s;
}

static stoke_status open_buffer(unsigned char *buf, size_t size, const char *name, stoke_ckpt **out)
{
    *out = NULL;
    stoke_ckpt *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(name))) {
        free(c);
        free(buf);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", name);
    }
    c->buf = buf;
    c->size = size;
    stoke_status s = parse(c);
    if (s != STOKE_OK) {
        stoke_ckpt_close(c);
        return s;
    }
    *out = c;
    return STOKE_OK;
}

stoke_status stoke_ckpt_open_memory(const void *data, size_t size, const char *name,
                                    stoke_ckpt **out)
{
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) {
        *out = NULL;
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", name);
    }
    if (size)
        memcpy(buf, data, size);
    return open_buffer(buf, size, name, out);
}

stoke_status stoke_ckpt_open(const char *path, stoke_ckpt **out)
{
    *out = NULL;
    int fd;
    struct stat st;
    stoke_status os = stoke_open_regular(path, &fd, &st);
    if (os != STOKE_OK)
        return os;
    size_t size = (size_t)st.st_size;
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory for %zu bytes", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            stoke_status s = stoke_fail(STOKE_ERR_IO, "%s: read failed at offset %zu: %s", path,
                                        got, r < 0 ? strerror(errno) : "file shrank");
            free(buf);
            close(fd);
            return s;
        }
        got += (size_t)r;
    }
    close(fd);
    return open_buffer(buf, size, path, out);
}
