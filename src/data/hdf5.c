/* hdf5.c - HDF5 files: named datasets of inputs and targets (first dimension = samples),
 * read through libhdf5. */
#include "data/dataset_impl.h"
#include "core/regular.h"
#include "data/seam.h"
#include "data/util_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Debian's libhdf5 is built thread-safe (one lock inside the library), but a serial
 * build elsewhere may not be: when H5is_library_threadsafe says no, every HDF5 call in
 * this file goes through h5_mutex. Either way HDF5 runs one call at a time, which is
 * why each dataset keeps a few cached blocks of rows so most reads never enter it. */
static pthread_mutex_t h5_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t h5_once = PTHREAD_ONCE_INIT;
static bool h5_threadsafe;

static void h5_init(void)
{
    hbool_t ts = 0;
    h5_threadsafe = H5is_library_threadsafe(&ts) >= 0 && ts;
}

/* Every stretch of HDF5 calls is bracketed by h5_enter/h5_leave. The automatic error
 * printing is per thread in a thread-safe build, so it is switched off on every
 * entry: library code never prints. */
static void h5_enter(void)
{
    pthread_once(&h5_once, h5_init);
    if (!h5_threadsafe)
        pthread_mutex_lock(&h5_mutex);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void h5_leave(void)
{
    H5Eclear2(H5E_DEFAULT);
    if (!h5_threadsafe)
        pthread_mutex_unlock(&h5_mutex);
}

static herr_t h5_err_walk(unsigned n, const H5E_error2_t *e, void *data)
{
    (void)n;
    char *msg = data;
    /* Walking downward, the last description is the innermost, most specific one. */
    if (e->desc && e->desc[0])
        snprintf(msg, 256, "%s", e->desc);
    return 0;
}

/* The current HDF5 error's description (call between h5_enter and h5_leave). */
static const char *h5_error(char msg[256])
{
    snprintf(msg, 256, "unknown HDF5 error");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5_err_walk, msg);
    return msg;
}

/* Cached rows per field are capped so a huge chunk shape cannot exhaust memory: a
 * block larger than this is not cached (rows are read one at a time and HDF5's own
 * chunk cache does the rest); smaller blocks get up to H5_SLOTS slots within it. */
#define H5_CACHE_BYTES ((size_t)64 << 20)
/* Several slots, so workers streaming different parts of the file (one batch each)
 * do not evict each other's block on every read. */
#define H5_SLOTS 8
/* Contiguous data has no chunk to align to: read-ahead blocks of about this size. */
#define H5_CONTIG_BLOCK_BYTES ((size_t)1 << 20)
/* Recent misses remembered to tell sequential streams from shuffled reads. */
#define H5_RECENT 8

/* Contiguous data up to this size is cached whole (H5_CACHE_BYTES). The test seam
 * (data/seam.h) lowers it, so the tests reach the read-ahead path without a 64 MB
 * fixture. */
static double h5_whole_max(void)
{
    double seam = stoke_data_seam_get()->hdf5_whole_max;
    return seam >= 0 ? seam : (double)H5_CACHE_BYTES;
}

/* One cached block: rows [first, first + n). `data` is replaced, never written in
 * place, so readers holding the read lock always see a whole block. */
typedef struct h5_slot {
    int64_t first, n;
    unsigned char *data;
    _Atomic uint64_t used; /* LRU clock of the last hit */
} h5_slot;

typedef struct h5_field {
    char name[256];
    hid_t dset, mem_type;
    int rank;
    hsize_t dims[H5S_MAX_RANK];
    stoke_dtype dtype;
    size_t row_bytes;
    bool chunked;
    int64_t block_rows; /* rows per cached block (chunk-aligned); 0: no cache */
    bool whole;         /* contiguous and small: one block holds every row */
    int nslots;
    pthread_rwlock_t lock; /* guards the slots' first, n and data */
    bool lock_ok;
    h5_slot slot[H5_SLOTS];
    _Atomic uint64_t clock;
    /* Contiguous data reads ahead only when access looks sequential. */
    _Atomic int64_t recent[H5_RECENT];
    _Atomic unsigned recent_pos;
    unsigned char *all; /* scalar (class / regression) targets: all of them, read on open */
} h5_field;

typedef struct h5_impl {
    hid_t file;
    h5_field in, tg;
    bool has_targets;
} h5_impl;

static const char *h5_class_name(H5T_class_t c)
{
    switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum (h5py stores bool as an enum)";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    default: return "unknown";
    }
}

/* Chooses the memory type HDF5 converts the stored type into (byte order, e.g. a
 * big-endian '>f8', is converted by HDF5 on read) and the stoke dtype it is. */
static stoke_status h5_map_type(const char *path, const h5_field *f, hid_t ftype, stoke_dtype *dt,
                                hid_t *mem)
{
    H5T_class_t c = H5Tget_class(ftype);
    size_t size = H5Tget_size(ftype);
    hid_t native = -1;
    if (c == H5T_INTEGER) {
        bool sgn = H5Tget_sign(ftype) == H5T_SGN_2;
        switch (size) {
        case 1:
            native = sgn ? H5T_NATIVE_INT8 : H5T_NATIVE_UINT8;
            *dt = sgn ? STOKE_I8 : STOKE_U8;
            break;
        case 2:
            native = sgn ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16;
            *dt = sgn ? STOKE_I16 : STOKE_U16;
            break;
        case 4:
            native = sgn ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32;
            *dt = sgn ? STOKE_I32 : STOKE_U32;
            break;
        case 8:
            if (!sgn)
                return stoke_fail(STOKE_ERR_FORMAT,
                                  "%s: HDF5 dataset '%s': uint64 elements are not supported "
                                  "(store them as int64)",
                                  path, f->name);
            native = H5T_NATIVE_INT64;
            *dt = STOKE_I64;
            break;
        default:
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: HDF5 dataset '%s': %zu-byte integers are not supported", path,
                              f->name, size);
        }
    } else if (c == H5T_FLOAT) {
        if (size == 2) {
            /* HDF5 1.10 has no predefined half type: h5py stores float16 as a custom
             * IEEE layout. Keep it 2 bytes, in the machine's byte order. */
            size_t spos, epos, esize, mpos, msize;
            if (H5Tget_fields(ftype, &spos, &epos, &esize, &mpos, &msize) < 0 || spos != 15 ||
                epos != 10 || esize != 5 || mpos != 0 || msize != 10 || H5Tget_ebias(ftype) != 15)
                return stoke_fail(STOKE_ERR_FORMAT,
                                  "%s: HDF5 dataset '%s': 2-byte floats that are not IEEE "
                                  "half precision are not supported",
                                  path, f->name);
            *mem = H5Tcopy(ftype);
            if (*mem < 0 || H5Tset_order(*mem, H5Tget_order(H5T_NATIVE_FLOAT)) < 0)
                return stoke_fail(STOKE_ERR_FORMAT,
                                  "%s: HDF5 dataset '%s': cannot make a float16 memory type", path,
                                  f->name);
            *dt = STOKE_F16;
            return STOKE_OK;
        }
        if (size == 4) {
            native = H5T_NATIVE_FLOAT;
            *dt = STOKE_F32;
        } else {
            native = H5T_NATIVE_DOUBLE; /* 8 bytes, or wider floats converted down */
            *dt = STOKE_F64;
        }
    } else {
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: HDF5 dataset '%s': %s elements are not supported (stoke reads "
                          "integers and floats)",
                          path, f->name, h5_class_name(c));
    }
    *mem = H5Tcopy(native);
    if (*mem < 0)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: HDF5 dataset '%s': cannot copy a memory type",
                          path, f->name);
    return STOKE_OK;
}

/* True if `name` is a dataset in the file (intermediate groups may be missing). */
static bool h5_is_dataset(hid_t file, const char *name)
{
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
        return false;
    hid_t o = H5Oopen(file, name, H5P_DEFAULT);
    if (o < 0)
        return false;
    bool is = H5Iget_type(o) == H5I_DATASET;
    H5Oclose(o);
    return is;
}

typedef struct h5_listing {
    char text[640];
    size_t len;
    int count;
} h5_listing;

static herr_t h5_list_cb(hid_t group, const char *name, const H5L_info_t *info, void *data)
{
    h5_listing *l = data;
    if (info->type != H5L_TYPE_HARD || !h5_is_dataset(group, name))
        return 0;
    char entry[320];
    int n = snprintf(entry, sizeof entry, "%s'%s'", l->count ? ", " : "", name);
    hid_t ds = H5Dopen2(group, name, H5P_DEFAULT);
    if (ds >= 0) {
        hid_t sp = H5Dget_space(ds);
        hsize_t dims[H5S_MAX_RANK];
        int rank = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, NULL) : -1;
        if (rank >= 0 && n > 0 && (size_t)n < sizeof entry) {
            n += snprintf(entry + n, sizeof entry - (size_t)n, " (");
            for (int k = 0; k < rank && (size_t)n < sizeof entry; k++)
                n += snprintf(entry + n, sizeof entry - (size_t)n, "%s%llu", k ? ", " : "",
                              (unsigned long long)dims[k]);
            if ((size_t)n < sizeof entry)
                snprintf(entry + n, sizeof entry - (size_t)n, ")");
        }
        if (sp >= 0)
            H5Sclose(sp);
        H5Dclose(ds);
    }
    size_t len = strlen(entry);
    if (l->len + len + 5 >= sizeof l->text) {
        snprintf(l->text + l->len, sizeof l->text - l->len, ", ...");
        return 1; /* stop: the message is long enough */
    }
    memcpy(l->text + l->len, entry, len + 1);
    l->len += len;
    l->count++;
    return 0;
}

/* "'x' (100, 28, 28), 'y' (100)" or "no datasets", for error messages. */
static void h5_list_datasets(hid_t file, h5_listing *l)
{
    memset(l, 0, sizeof *l);
    H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, h5_list_cb, l);
    if (l->count == 0 && l->len == 0)
        snprintf(l->text, sizeof l->text, "no datasets");
}

/* Picks the dataset name: the one asked for, else the first default that exists.
 * Returns false (no message) if none exists. */
static bool h5_pick(hid_t file, const char *asked, const char *const *defaults, char *out,
                    size_t size)
{
    if (asked) {
        if (!h5_is_dataset(file, asked))
            return false;
        snprintf(out, size, "%s", asked);
        return true;
    }
    for (const char *const *n = defaults; *n; n++)
        if (h5_is_dataset(file, *n)) {
            snprintf(out, size, "%s", *n);
            return true;
        }
    return false;
}

/* Opens one named dataset and reads its shape and type; `samples` is the first
 * dimension. */
static stoke_status h5_field_open(const char *path, hid_t file, h5_field *f, int64_t *samples)
{
    char msg[256];
    f->dset = H5Dopen2(file, f->name, H5P_DEFAULT);
    if (f->dset < 0)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: HDF5 dataset '%s': cannot open: %s", path, f->name,
                          h5_error(msg));
    hid_t space = H5Dget_space(f->dset);
    hid_t ftype = H5Dget_type(f->dset);
    hid_t dcpl = H5Dget_create_plist(f->dset);
    stoke_status st = STOKE_OK;
    if (space < 0 || ftype < 0 || dcpl < 0) {
        st = stoke_fail(STOKE_ERR_FORMAT, "%s: HDF5 dataset '%s': cannot read its header: %s", path,
                        f->name, h5_error(msg));
        goto done;
    }
    f->rank = H5Sget_simple_extent_ndims(space);
    if (f->rank < 1) {
        st = stoke_fail(STOKE_ERR_FORMAT,
                        "%s: HDF5 dataset '%s' is a scalar: it needs a first dimension of samples",
                        path, f->name);
        goto done;
    }
    if (f->rank > STOKE_MAX_DIMS + 1) {
        st = stoke_fail(STOKE_ERR_FORMAT, "%s: HDF5 dataset '%s' has %d dimensions (at most %d)",
                        path, f->name, f->rank, STOKE_MAX_DIMS + 1);
        goto done;
    }
    H5Sget_simple_extent_dims(space, f->dims, NULL);
    st = h5_map_type(path, f, ftype, &f->dtype, &f->mem_type);
    if (st != STOKE_OK)
        goto done;
    size_t row = stoke_dtype_size(f->dtype);
    for (int k = 1; k < f->rank; k++) {
        if (f->dims[k] != 0 && row > SIZE_MAX / 4 / f->dims[k]) {
            st = stoke_fail(STOKE_ERR_FORMAT, "%s: HDF5 dataset '%s': one sample is too large",
                            path, f->name);
            goto done;
        }
        row *= f->dims[k];
    }
    f->row_bytes = row;
    *samples = (int64_t)f->dims[0];
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t chunk[H5S_MAX_RANK];
        if (H5Pget_chunk(dcpl, f->rank, chunk) == f->rank && chunk[0] > 0) {
            f->chunked = true;
            f->block_rows = (int64_t)chunk[0];
        }
    } else if (row > 0 && (double)*samples * (double)row <= h5_whole_max()) {
        /* Contiguous data that fits the cache is read whole on first use: every later
         * read, shuffled or not, is then a copy. Row-by-row reads of a shuffled epoch
         * cost tens of microseconds each in HDF5, and the read-ahead below cannot tell
         * a shuffle from a stream when the file is only a few blocks long. */
        f->block_rows = *samples;
        f->whole = true;
    } else if (row > 0) {
        f->block_rows = (int64_t)(H5_CONTIG_BLOCK_BYTES / row);
    }
    if (f->block_rows > *samples)
        f->block_rows = *samples;
    if (row == 0 || f->block_rows < 1 || (size_t)f->block_rows > H5_CACHE_BYTES / row)
        f->block_rows = 0;
    if (f->block_rows > 0) {
        size_t fit = H5_CACHE_BYTES / ((size_t)f->block_rows * row);
        f->nslots = fit < 1 ? 1 : fit > H5_SLOTS ? H5_SLOTS : (int)fit;
    }
done:
    if (space >= 0)
        H5Sclose(space);
    if (ftype >= 0)
        H5Tclose(ftype);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    return st;
}

/* Reads rows [first, first + n) of f into buf. Call between h5_enter and h5_leave. */
static stoke_status h5_read_rows(const char *path, h5_field *f, int64_t first, int64_t n, void *buf)
{
    char msg[256];
    hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
    start[0] = (hsize_t)first;
    count[0] = (hsize_t)n;
    for (int k = 1; k < f->rank; k++)
        count[k] = f->dims[k];
    /* A file space per read: selections live in the space, and threads share f. */
    hid_t fspace = H5Dget_space(f->dset);
    hid_t mspace = H5Screate_simple(f->rank, count, NULL);
    herr_t rc = -1;
    if (fspace >= 0 && mspace >= 0 &&
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) >= 0)
        rc = H5Dread(f->dset, f->mem_type, mspace, fspace, H5P_DEFAULT, buf);
    stoke_status st = STOKE_OK;
    if (rc < 0) {
        if (n == 1)
            st = stoke_fail(STOKE_ERR_FORMAT, "%s: HDF5 dataset '%s' sample %lld: read failed: %s",
                            path, f->name, (long long)first, h5_error(msg));
        else
            st = stoke_fail(STOKE_ERR_FORMAT,
                            "%s: HDF5 dataset '%s' samples %lld to %lld: read failed: %s", path,
                            f->name, (long long)first, (long long)(first + n - 1), h5_error(msg));
    }
    if (fspace >= 0)
        H5Sclose(fspace);
    if (mspace >= 0)
        H5Sclose(mspace);
    return st;
}

static stoke_status h5_read_rows_locked(const char *path, h5_field *f, int64_t first, int64_t n,
                                        void *buf)
{
    h5_enter();
    stoke_status st = h5_read_rows(path, f, first, n, buf);
    h5_leave();
    return st;
}

/* True if a recent miss was near i: someone is reading this region in order. */
static bool h5_sequential(h5_field *f, int64_t i)
{
    for (int k = 0; k < H5_RECENT; k++) {
        int64_t r = atomic_load_explicit(&f->recent[k], memory_order_relaxed);
        if (r >= 0 && (i > r ? i - r : r - i) <= f->block_rows)
            return true;
    }
    return false;
}

/* Sample i of field f into out: from a cached block if one holds i, else from the
 * file, caching i's block when that is likely to pay off. The block is read outside
 * the field's lock, so other threads keep copying from cached blocks meanwhile. */
static stoke_status h5_field_read(const char *path, h5_field *f, int64_t i, void *out)
{
    if (f->all) {
        memcpy(out, f->all + (size_t)i * f->row_bytes, f->row_bytes);
        return STOKE_OK;
    }
    if (f->block_rows == 0)
        return h5_read_rows_locked(path, f, i, 1, out);
    int64_t first = i / f->block_rows * f->block_rows;
    bool prev_cached = false;
    pthread_rwlock_rdlock(&f->lock);
    for (int k = 0; k < f->nslots; k++) {
        h5_slot *s = &f->slot[k];
        if (s->n && i >= s->first && i < s->first + s->n) {
            memcpy(out, s->data + (size_t)(i - s->first) * f->row_bytes, f->row_bytes);
            atomic_store_explicit(&s->used, atomic_fetch_add(&f->clock, 1) + 1,
                                  memory_order_relaxed);
            pthread_rwlock_unlock(&f->lock);
            return STOKE_OK;
        }
        if (s->n && s->first + s->n == first)
            prev_cached = true;
    }
    pthread_rwlock_unlock(&f->lock);

    /* A chunk is decompressed whole whatever is read from it, so chunked data always
     * caches the chunk's rows; contiguous data reads a block only for sequential
     * reading, since a shuffled read would waste it. */
    bool seq = prev_cached || h5_sequential(f, i);
    unsigned pos = atomic_fetch_add_explicit(&f->recent_pos, 1, memory_order_relaxed);
    atomic_store_explicit(&f->recent[pos % H5_RECENT], i, memory_order_relaxed);
    if (!f->chunked && !f->whole && !seq)
        return h5_read_rows_locked(path, f, i, 1, out);
    int64_t n = f->block_rows;
    if (first + n > (int64_t)f->dims[0])
        n = (int64_t)f->dims[0] - first;
    unsigned char *block = malloc((size_t)n * f->row_bytes);
    if (!block) /* not fatal: this read goes row by row */
        return h5_read_rows_locked(path, f, i, 1, out);
    if (h5_read_rows_locked(path, f, first, n, block) != STOKE_OK) {
        free(block); /* say which sample failed, from a read of it alone */
        return h5_read_rows_locked(path, f, i, 1, out);
    }
    memcpy(out, block + (size_t)(i - first) * f->row_bytes, f->row_bytes);

    pthread_rwlock_wrlock(&f->lock);
    h5_slot *victim = NULL;
    for (int k = 0; k < f->nslots && !victim; k++)
        if (f->slot[k].n && f->slot[k].first == first)
            victim = &f->slot[k]; /* another thread read the same block meanwhile */
    for (int k = 0; k < f->nslots && !victim; k++)
        if (!f->slot[k].n)
            victim = &f->slot[k];
    if (!victim) { /* the least recently used */
        victim = &f->slot[0];
        for (int k = 1; k < f->nslots; k++)
            if (atomic_load(&f->slot[k].used) < atomic_load(&victim->used))
                victim = &f->slot[k];
    }
    unsigned char *old = victim->data;
    victim->data = block;
    victim->first = first;
    victim->n = n;
    atomic_store(&victim->used, atomic_fetch_add(&f->clock, 1) + 1);
    pthread_rwlock_unlock(&f->lock);
    free(old);
    return STOKE_OK;
}

static stoke_status h5_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    h5_impl *h = d->impl;
    stoke_status st = h5_field_read(d->path, &h->in, i, input);
    if (st == STOKE_OK && target && h->has_targets)
        st = h5_field_read(d->path, &h->tg, i, target);
    return st;
}

static void h5_field_free(h5_field *f)
{
    if (f->dset >= 0)
        H5Dclose(f->dset);
    if (f->mem_type >= 0)
        H5Tclose(f->mem_type);
    if (f->lock_ok)
        pthread_rwlock_destroy(&f->lock);
    for (int k = 0; k < H5_SLOTS; k++)
        free(f->slot[k].data);
    free(f->all);
}

static void h5_free(h5_impl *h)
{
    if (!h)
        return;
    h5_enter();
    h5_field_free(&h->in);
    h5_field_free(&h->tg);
    if (h->file >= 0)
        H5Fclose(h->file);
    h5_leave();
    free(h);
}

static void h5_close(stoke_dataset *d)
{
    h5_free(d->impl);
    d->impl = NULL;
}

static const char *const h5_input_names[] = {"inputs", "x", "X", "data", "features", NULL};
static const char *const h5_target_names[] = {"targets", "y", "Y", "labels", NULL};

static void h5_shape_of(const h5_field *f, stoke_shape *s)
{
    s->ndim = f->rank - 1;
    for (int k = 1; k < f->rank; k++)
        s->dims[k - 1] = (int64_t)f->dims[k];
}

/* Sample i's integer target, from the targets read on open. */
static int64_t h5_label(const h5_field *f, int64_t i)
{
    const unsigned char *p = f->all + (size_t)i * f->row_bytes;
    switch (f->dtype) {
    case STOKE_U8: return *p;
    case STOKE_I8: return *(const int8_t *)p;
    case STOKE_U16: {
        uint16_t x;
        memcpy(&x, p, 2);
        return x;
    }
    case STOKE_I16: {
        int16_t x;
        memcpy(&x, p, 2);
        return x;
    }
    case STOKE_U32: {
        uint32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    case STOKE_I32: {
        int32_t x;
        memcpy(&x, p, 4);
        return x;
    }
    default: {
        int64_t x;
        memcpy(&x, p, 8);
        return x;
    }
    }
}

/* Class targets are read whole on open: num_classes needs the largest label, and a
 * negative label is a format error found now rather than mid-epoch. Regression
 * targets are kept too; either way reading a target never enters the library. */
static stoke_status h5_load_scalar_targets(const char *path, h5_field *f, int64_t count,
                                           stoke_dataset_info *info)
{
    size_t bytes = (size_t)count * f->row_bytes;
    f->all = malloc(bytes ? bytes : 1);
    if (!f->all)
        return stoke_fail(STOKE_ERR_NOMEM,
                          "%s: HDF5 dataset '%s': cannot hold %zu bytes of targets", path, f->name,
                          bytes);
    stoke_status st = count ? h5_read_rows(path, f, 0, count, f->all) : STOKE_OK;
    if (st != STOKE_OK)
        return st;
    if (f->dtype == STOKE_F16 || f->dtype == STOKE_F32 || f->dtype == STOKE_F64) {
        info->target_kind = STOKE_TARGET_SCALAR;
        return STOKE_OK;
    }
    info->target_kind = STOKE_TARGET_CLASS;
    int64_t max = -1;
    for (int64_t i = 0; i < count; i++) {
        int64_t v = h5_label(f, i);
        /* the shape of util.c's label check (IDX, NPY), which names file and sample */
        if (v < 0 || v >= STOKE_MAX_CLASSES)
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: HDF5 dataset '%s': sample %lld: label %lld is not a class "
                              "index (0 to %d)",
                              path, f->name, (long long)i, (long long)v, STOKE_MAX_CLASSES - 1);
        if (v > max)
            max = v;
    }
    info->num_classes = max + 1;
    return STOKE_OK;
}

static stoke_status h5_class_counts(stoke_dataset *d, int64_t *counts)
{
    h5_impl *h = d->impl;
    memset(counts, 0, sizeof *counts * (size_t)d->info.num_classes);
    for (int64_t i = 0; i < d->info.count; i++)
        counts[h5_label(&h->tg, i)]++;
    return STOKE_OK;
}

static stoke_status h5_open_file(stoke_dataset *d, h5_impl *h, const char *path,
                                 const stoke_dataset_opts *o)
{
    char msg[256];
    stoke_dataset_info *info = &d->info;
    /* HDF5 leaves errno unreliable (it probes other names), and it would open a FIFO
     * and block: check first. HDF5 opens by name and takes no descriptor, so a FIFO
     * swapped in between this check and H5Fopen could still block; nothing narrower
     * is possible short of reading the whole file into memory. */
    int fd;
    stoke_status ost = stoke_open_regular(path, &fd, NULL);
    if (ost != STOKE_OK)
        return ost;
    close(fd);
    h->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (h->file < 0)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: not a readable HDF5 file: %s", path,
                          h5_error(msg));
    const char *in_asked = o ? o->input_name : NULL;
    const char *tg_asked = o ? o->target_name : NULL;
    h5_listing l;
    if (!h5_pick(h->file, in_asked, h5_input_names, h->in.name, sizeof h->in.name)) {
        h5_list_datasets(h->file, &l);
        if (in_asked)
            return stoke_fail(STOKE_ERR_NOTFOUND,
                              "%s: no HDF5 dataset '%s' for the inputs; the file has %s", path,
                              in_asked, l.text);
        return stoke_fail(STOKE_ERR_NOTFOUND,
                          "%s: no inputs dataset (looked for 'inputs', 'x', 'X', 'data', "
                          "'features'; name it with the input name option); the file has %s",
                          path, l.text);
    }
    h->has_targets = h5_pick(h->file, tg_asked, h5_target_names, h->tg.name, sizeof h->tg.name);
    if (!h->has_targets && tg_asked) {
        h5_list_datasets(h->file, &l);
        return stoke_fail(STOKE_ERR_NOTFOUND,
                          "%s: no HDF5 dataset '%s' for the targets; the file has %s", path,
                          tg_asked, l.text);
    }

    int64_t n_in = 0, n_tg = 0;
    stoke_status st = h5_field_open(path, h->file, &h->in, &n_in);
    if (st != STOKE_OK)
        return st;
    info->count = n_in;
    h5_shape_of(&h->in, &info->input_shape);
    info->input_dtype = h->in.dtype;
    info->input_bytes = h->in.row_bytes;
    if (!h->has_targets) {
        info->target_kind = STOKE_TARGET_NONE;
        return STOKE_OK;
    }
    st = h5_field_open(path, h->file, &h->tg, &n_tg);
    if (st != STOKE_OK)
        return st;
    if (n_tg != n_in)
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s: HDF5 inputs '%s' have %lld samples but targets '%s' have %lld", path,
                          h->in.name, (long long)n_in, h->tg.name, (long long)n_tg);
    h5_shape_of(&h->tg, &info->target_shape);
    info->target_dtype = h->tg.dtype;
    info->target_bytes = h->tg.row_bytes;
    if (h->tg.rank == 1)
        return h5_load_scalar_targets(path, &h->tg, n_in, info);
    info->target_kind = STOKE_TARGET_VECTOR;
    return STOKE_OK;
}

static stoke_status h5_field_alloc(const char *path, h5_field *f)
{
    if (pthread_rwlock_init(&f->lock, NULL) != 0)
        return stoke_fail(STOKE_ERR_SYSTEM, "%s: cannot create a lock", path);
    f->lock_ok = true;
    for (int k = 0; k < H5_RECENT; k++)
        atomic_init(&f->recent[k], -1);
    return STOKE_OK;
}

/* The HDF5 signature sits at offset 0, or at 512, 1024, 2048... when a user block
 * precedes it; stoke looks at the first four places. */
bool stoke_hdf5_sniff(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    static const off_t where[] = {0, 512, 1024, 2048};
    int fd;
    if (stoke_open_regular(path, &fd, NULL) != STOKE_OK)
        return false;
    bool found = false;
    for (size_t k = 0; k < sizeof where / sizeof where[0] && !found; k++) {
        unsigned char b[8];
        found = pread(fd, b, sizeof b, where[k]) == (ssize_t)sizeof b && memcmp(b, sig, 8) == 0;
    }
    close(fd);
    return found;
}

static const stoke_dataset_vt h5_vt = {
    .read = h5_read, .close = h5_close, .class_counts = h5_class_counts};

stoke_status stoke_hdf5_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o)
{
    h5_impl *h = calloc(1, sizeof *h);
    if (!h)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
    h->file = h->in.dset = h->in.mem_type = h->tg.dset = h->tg.mem_type = -1;
    if (d->path[0] == '\0')
        snprintf(d->path, sizeof d->path, "%s", path);
    memset(&d->info, 0, sizeof d->info);
    snprintf(d->info.format, sizeof d->info.format, "hdf5");

    h5_enter();
    stoke_status st = h5_open_file(d, h, path, o);
    h5_leave();
    if (st == STOKE_OK)
        st = h5_field_alloc(path, &h->in);
    if (st == STOKE_OK && h->has_targets)
        st = h5_field_alloc(path, &h->tg);
    if (st != STOKE_OK) {
        h5_free(h);
        return st;
    }
    d->vt = &h5_vt;
    d->impl = h;
    return STOKE_OK;
}
