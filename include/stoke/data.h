/* data.h - the data pipeline: datasets in the formats people have, a sampler, seeded
 * transforms, and a loader whose worker threads fill a ring of prefetched batch slots
 * (pinned, with an asynchronous device copy, where the CUDA runtime is loadable). */
#ifndef STOKE_DATA_H
#define STOKE_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Datasets ------------------------------------------------------------------ */

typedef enum stoke_target_kind {
    STOKE_TARGET_NONE = 0, /* inputs only */
    STOKE_TARGET_CLASS,    /* one integer class index per sample (ndim 0) */
    STOKE_TARGET_SCALAR,   /* one float per sample (regression, ndim 0) */
    STOKE_TARGET_VECTOR,   /* a vector or tensor per sample */
} stoke_target_kind;

/* "none", "class", "scalar", "vector"; "?" if invalid. */
const char *stoke_target_kind_name(stoke_target_kind k);

typedef struct stoke_dataset_info {
    char format[16];         /* "idx", "npy", "hdf5", "images", "records" */
    int64_t count;           /* number of samples */
    stoke_shape input_shape; /* per sample, e.g. (28, 28) or (224, 224, 3) */
    stoke_dtype input_dtype;
    stoke_target_kind target_kind;
    stoke_shape target_shape; /* per sample; ndim 0 for class and scalar targets */
    stoke_dtype target_dtype;
    int64_t num_classes; /* for class targets: max label + 1, or the folder count
                                 for image folders; 0 otherwise */
    size_t input_bytes;  /* bytes of one sample's input, as read */
    size_t target_bytes; /* bytes of one sample's target, as read (0 if none) */
} stoke_dataset_info;

/* Options for opening; zero-initialize and set what applies. */
typedef struct stoke_dataset_opts {
    const char *split;        /* IDX directories: "train" (default) or "test"
                                 (t10k files); image folders: a subdirectory name */
    const char *targets_path; /* NPY: the targets file when PATH names the inputs
                                 (default: PATH with "x"/"inputs" -> "y"/"targets",
                                 see docs/data.md) */
    const char *input_name;   /* HDF5: dataset of inputs (default "inputs", then "x",
                                 "X", "data", "features") */
    const char *target_name;  /* HDF5: dataset of targets (default "targets", then
                                 "y", "Y", "labels"; none of them: inputs only) */
    int image_height;         /* image folders: every image is resized to this */
    int image_width;          /*   (default 224 x 224) */
    int image_channels;       /* image folders: 1 or 3 (default 3) */
    bool regression;          /* float targets of ndim 0 are SCALAR, not CLASS (for
                                 integer-valued float files) */
} stoke_dataset_opts;

typedef struct stoke_dataset stoke_dataset;

/* Opens the dataset at `path`, recognising the format from its contents:
 * a directory of IDX files (train-images-idx3-ubyte[.gz] + train-labels-idx1-ubyte[.gz],
 * or t10k-* for split "test"), an IDX file, an NPY file (with its targets file), an
 * HDF5 file, a directory with one subdirectory of JPEG/PNG images per class, or a
 * stoke packed-records file. The whole file header (and, for records, the whole file
 * size) is checked here so nothing fails halfway through an epoch. A path (or a file
 * of the dataset) that is neither a regular file nor a directory (a FIFO, a device) is
 * STOKE_ERR_IO naming it and what it is; nothing is opened in a way that could block.
 * opts may be NULL. On failure *out is NULL and the message names the file, the
 * offset or field, and what was wrong (STOKE_ERR_NOTFOUND, STOKE_ERR_FORMAT,
 * STOKE_ERR_IO). On success close with stoke_dataset_close. */
stoke_status stoke_dataset_open(const char *path, const stoke_dataset_opts *opts,
                                stoke_dataset **out);

const stoke_dataset_info *stoke_dataset_get_info(const stoke_dataset *d);

/* True when the samples are images the loader can read from their originals (image
 * folders, packed JPEG records): a transform beginning with RandomResizedCrop (or the
 * validation pair) then draws its window on the original, decoded at the window's
 * scale (docs/loader.md). */
bool stoke_dataset_has_originals(const stoke_dataset *d);

/* The path d was opened from, for messages: a dataset loaded into memory or a prefix
 * keeps its source's; "(memory)" for arrays. Never NULL; belongs to d. */
const char *stoke_dataset_path(const stoke_dataset *d);

/* What opening left out: image folders leave out a symbolic link that leads out of
 * its class folder (to another class, the root, or out of the dataset) or nowhere, a
 * folder or file reached a second time (a link loop, a second link to it; each file
 * is one sample, by device and inode), a folder more than 8 levels below its class
 * folder, and a class folder that is a symbolic link (docs/data.md). Returns how many,
 * and in *example (if not NULL) the first as "PATH: why" (owned by d; NULL when none).
 * 0 for the other formats. */
int64_t stoke_dataset_skipped(const stoke_dataset *d, const char **example);

/* Reads sample i: its input into `input` (info.input_bytes) and its target into
 * `target` (info.target_bytes; may be NULL to skip). Thread-safe: many workers may
 * read at once. Errors (STOKE_ERR_FORMAT, STOKE_ERR_IO, STOKE_ERR_ARG for i out of
 * range) name the file and the sample index. */
stoke_status stoke_dataset_read(stoke_dataset *d, int64_t i, void *input, void *target);

void stoke_dataset_close(stoke_dataset *d); /* NULL is fine */

/* Class balance: counts[c] = samples of class c, for c < info.num_classes (the caller
 * allocates num_classes entries). STOKE_ERR_ARG if the targets are not classes. */
stoke_status stoke_dataset_class_counts(stoke_dataset *d, int64_t *counts);

/* The name of class c (0 <= c < info.num_classes): an image folder's class folder;
 * NULL when the format does not name its classes or c is out of range. The string
 * belongs to d. */
const char *stoke_dataset_class_name(const stoke_dataset *d, int64_t c);

/* The sizes of a dataset's images as stored, before the resize to info.input_shape. */
typedef struct stoke_image_sizes {
    int min_width, max_width;   /* pixels */
    int min_height, max_height; /* pixels */
    int64_t read;               /* images whose header was read: all, or an even sample */
} stoke_image_sizes;

/* Reads the headers (no pixel is decoded) of at most max_images images (every (count /
 * max_images)-th from the start; max_images <= 0: all) into *out. STOKE_ERR_ARG when
 * the dataset is not of image files (image folders are); else the errors of reading
 * and parsing a file, naming it. */
stoke_status stoke_dataset_image_sizes(stoke_dataset *d, int64_t max_images,
                                       stoke_image_sizes *out);

/* Per-channel mean and std of the inputs (uint8 or float32), in the transforms' scale
 * (uint8 / 255), over at most max_samples samples, every (count / max_samples)-th from
 * the start: what a normalize op without given statistics uses. Channels follow the
 * transforms' AUTO layout (a 3-D sample is HWC when its last dimension is 1, 3 or 4,
 * else CHW; anything else is one channel); *channels receives how many (1..4). A
 * channel with no spread gets std 1; an empty dataset mean 0, std 1. STOKE_ERR_ARG for
 * other dtypes or more than 4 channels, else the errors of stoke_dataset_read. */
stoke_status stoke_dataset_channel_stats(stoke_dataset *d, int64_t max_samples, int *channels,
                                         float mean[4], float std[4]);

/* Writes every sample of `d` as a stoke packed-records file at `path` (format in
 * docs/formats.md), through a temporary file renamed into place at the end, so a
 * failure never leaves a partial file under `path`; the temporary file is removed on
 * every failure and when SIGINT, SIGTERM, SIGHUP or SIGXFSZ ends the process mid-write.
 * Failures (STOKE_ERR_IO) name the file and the cause: a full disk, the file-size
 * limit (with SIGXFSZ ignored), a `path` that is not a regular file. `progress` (may
 * be NULL) is called now and then with samples done and total. */
stoke_status stoke_records_write(stoke_dataset *d, const char *path,
                                 void (*progress)(void *ctx, int64_t done, int64_t total),
                                 void *ctx);

/* What each record of a packed-records file holds (docs/formats.md). */
typedef enum stoke_records_store {
    STOKE_STORE_PIXELS = 0, /* the samples as read: fixed-size records (version 1) */
    STOKE_STORE_JPEG,       /* image folders only: each image file's own bytes (JPEG, or
                               PNG where the folder has one), decoded on every read as the
                               folder's files are (version 2): several times smaller */
} stoke_records_store;

/* stoke_records_write with a choice of store. STOKE_STORE_JPEG decodes each image once
 * while converting (at 1/8 scale where it can), so a damaged file fails the convert
 * naming it; a source that is not an image folder is STOKE_ERR_ARG. */
stoke_status stoke_records_write_as(stoke_dataset *d, const char *path, stoke_records_store store,
                                    void (*progress)(void *ctx, int64_t done, int64_t total),
                                    void *ctx);

/* A packed-records dataset's storage: "pixels" (version 1) or "jpeg" (version 2), and
 * in *bytes_per_sample (may be NULL) the bytes a sample takes in the file on average
 * (the record size; for "jpeg", the image bytes' mean). NULL, and 0, for any other
 * dataset. */
const char *stoke_records_encoding(const stoke_dataset *d, double *bytes_per_sample);

/* ---- Sampler ------------------------------------------------------------------- */

/* Which samples, in which order, make each batch of an epoch. With several ranks
 * (data parallel), the epoch's order is cut into global batches of world_size x
 * batch_size samples and rank r takes the r-th contiguous part of each, so a step of
 * N ranks covers the samples one process would with N micro-batches accumulated, in
 * the same order. The order is padded by wrapping around to a multiple of world_size
 * (as PyTorch's DistributedSampler pads): every rank gets ceil(count / world_size)
 * samples an epoch and the same number of batches, so every sample is seen at least
 * once and exactly once when world_size divides count. `exact` (evaluation) pads
 * nothing: every sample exactly once over the ranks, the last batch's shares may
 * differ and a rank may have one batch fewer. */
typedef struct stoke_sampler_opts {
    int64_t batch_size; /* samples per batch (>= 1) */
    bool shuffle;       /* a fresh permutation each epoch, from (seed, epoch) only */
    uint64_t seed;      /* also keys the transforms' random streams */
    bool drop_last;     /* drop each epoch's last batch when it is smaller */
    int rank;           /* 0 <= rank < world_size */
    int world_size;     /* 0 means 1 */
    bool exact;         /* no padding (above) */
} stoke_sampler_opts;

/* Position in the stream of batches: `index` counts the positions of `epoch`'s order
 * already handed out over all ranks (one process: its samples), so a state saved by
 * one world resumes in a world of another size. Saved with a checkpoint, it resumes
 * training mid-epoch. */
typedef struct stoke_sampler_state {
    int64_t epoch;
    int64_t index;
} stoke_sampler_state;

typedef struct stoke_sampler stoke_sampler;

/* A sampler over `count` samples, at epoch 0, index 0. STOKE_ERR_ARG for a bad option,
 * STOKE_ERR_NOMEM. Free with stoke_sampler_destroy. */
stoke_status stoke_sampler_create(int64_t count, const stoke_sampler_opts *o, stoke_sampler **out);
void stoke_sampler_destroy(stoke_sampler *s); /* NULL is fine */

int64_t stoke_sampler_epoch_samples(const stoke_sampler *s); /* this rank's, per epoch */
int64_t stoke_sampler_epoch_batches(const stoke_sampler *s); /* after drop_last */

/* The next batch's sample indices into idx (batch_size entries) and its epoch; returns
 * how many (the last batch of an epoch may be smaller). At the end of an epoch it
 * returns 0 once (an end-of-epoch marker) and moves to the next epoch. Can't fail. */
int64_t stoke_sampler_next(stoke_sampler *s, int64_t *idx, int64_t *epoch);

stoke_sampler_state stoke_sampler_get_state(const stoke_sampler *s);
/* STOKE_ERR_ARG if the state is outside this sampler's epoch (index beyond the
 * positions of an epoch over all ranks). */
stoke_status stoke_sampler_set_state(stoke_sampler *s, stoke_sampler_state st);

/* ---- Transforms ---------------------------------------------------------------- */

/* How a 3-D input is laid out. AUTO: (H, W) for 2-D; for 3-D, HWC when the last dim
 * is 1, 3 or 4, else CHW when the first is, else an error. */
typedef enum stoke_image_layout {
    STOKE_LAYOUT_AUTO = 0,
    STOKE_LAYOUT_HWC, /* also NHWC ("channels last") for outputs */
    STOKE_LAYOUT_CHW, /* also NCHW for outputs */
} stoke_image_layout;

typedef enum stoke_op_kind {
    STOKE_OP_RESIZE = 1,   /* bilinear, align_corners=False, no antialias */
    STOKE_OP_CROP,         /* zero-pad `pad` on each side, then a random (or centre)
                              height x width crop: torchvision RandomCrop(padding=) */
    STOKE_OP_HFLIP,        /* mirror left-right with probability p */
    STOKE_OP_COLOR_JITTER, /* torchvision ColorJitter on values in [0, 1] */
    STOKE_OP_NORMALIZE,    /* (x - mean[c]) / std[c] */
    /* torchvision RandomResizedCrop: a window of random area (fraction uniform in scale)
     * and aspect (log-uniform in ratio), resized to height x width. As the first op on u8
     * HWC input it resamples with Pillow's antialiased bilinear filter (torchvision on PIL
     * images); elsewhere as RESIZE does. */
    STOKE_OP_RANDOM_RESIZED_CROP,
    /* torchvision Resize(int): the shorter side to `height`, the aspect kept (the longer
     * side truncated); a centre CROP after it makes the evaluation transform. */
    STOKE_OP_RESIZE_SHORTER,
} stoke_op_kind;

typedef struct stoke_op {
    stoke_op_kind kind;
    int height, width;                           /* RESIZE, CROP, RANDOM_RESIZED_CROP: output
                                                    size; RESIZE_SHORTER: height */
    int pad;                                     /* CROP: zero padding on every side */
    bool center;                                 /* CROP: centre instead of random (evaluation) */
    float p;                                     /* HFLIP: probability (0 means 0.5) */
    float brightness, contrast, saturation, hue; /* COLOR_JITTER: torchvision's
                             ranges: factor in [max(0, 1-b), 1+b]; hue in [-h, h],
                             h <= 0.5 */
    bool random_order;                           /* COLOR_JITTER: a random order of the four (as
                             torchvision); false: b, c, s, h */
    float mean[4], std[4];                       /* NORMALIZE: per channel, in the [0, 1] scale */
    /* RANDOM_RESIZED_CROP: the area fraction and aspect (width / height) ranges; {0, 0}
     * means torchvision's (0.08, 1) and (3/4, 4/3). */
    float scale[2], ratio[2];
} stoke_op;

/* A transform pipeline: an input sample (u8 or f32) of `in_shape`; u8 values are
 * scaled to [0, 1] first (as ToTensor), f32 values are taken as they are; then the
 * ops in order; then conversion to out_dtype in out_layout. The random parameters of
 * a sample (crop offsets, flip, jitter factors and order) come from a stream keyed by
 * (seed, epoch, sample index) only, so they never depend on the worker. */
typedef struct stoke_transform_opts {
    stoke_shape in_shape;
    stoke_dtype in_dtype;         /* STOKE_U8 or STOKE_F32 */
    stoke_image_layout in_layout; /* AUTO: see stoke_image_layout */
    const stoke_op *ops;          /* copied by stoke_transform_create */
    int nops;
    stoke_dtype out_dtype;         /* STOKE_F32, STOKE_BF16 or STOKE_F16 (round to nearest
                                     even); STOKE_U8, the zero value, means F32 */
    stoke_image_layout out_layout; /* CHW (AUTO) or HWC */
    bool out_u8; /* uint8 output instead (out_dtype left 0): [0, 1] as 0..255, rounded;
                    a quarter of float32's bytes to copy to the device, where the consumer
                    normalizes (a NORMALIZE op is refused) */
} stoke_transform_opts;

typedef struct stoke_transform stoke_transform;

/* Checks the options (STOKE_ERR_ARG naming the op and field) and builds the pipeline.
 * The common path (u8 -> crop with padding -> flip -> normalize -> f32) runs as one
 * fused, vectorized pass. Free with stoke_transform_destroy. */
stoke_status stoke_transform_create(const stoke_transform_opts *o, stoke_transform **out);
void stoke_transform_destroy(stoke_transform *t); /* NULL is fine */

/* Whether a transform costs one cheap pass over each sample as held: none (NULL), only
 * NORMALIZE (no random work), or u8 samples through CROP, HFLIP and NORMALIZE alone
 * (the fused path above). Resampling (RESIZE, RANDOM_RESIZED_CROP, RESIZE_SHORTER) and
 * COLOR_JITTER are not. The tuner's stoke_tune_request.cheap_transform: `stoke train`
 * and stoke.Loader both ask here. */
bool stoke_transform_one_pass(const stoke_transform_opts *o);

/* Output shape (C, H, W) or (H, W, C), dtype, and bytes of one transformed sample. */
stoke_shape stoke_transform_out_shape(const stoke_transform *t);
stoke_dtype stoke_transform_out_dtype(const stoke_transform *t);
size_t stoke_transform_out_bytes(const stoke_transform *t);

/* Bytes of scratch memory stoke_transform_apply needs (0 for the fused path). */
size_t stoke_transform_scratch_bytes(const stoke_transform *t);

/* Transforms one sample `in` into `out` (stoke_transform_out_bytes). `scratch` is
 * stoke_transform_scratch_bytes of the caller's memory, one per thread (may be NULL
 * when that is 0). Thread-safe; can't fail. */
void stoke_transform_apply(const stoke_transform *t, const void *in, void *out, void *scratch,
                           uint64_t seed, int64_t epoch, int64_t index);

/* The rounding conversions to f16/bf16 the transforms use are in core.h. */

/* ---- In-memory datasets ---------------------------------------------------------- */

/* A dataset over the caller's arrays: `inputs` holds info->count samples of
 * info->input_bytes each, `targets` (NULL if info->target_kind is NONE) as many of
 * info->target_bytes. copy=false borrows the arrays (they must outlive the dataset);
 * copy=true copies them. The info's input_bytes and target_bytes must match its shapes
 * and dtypes (STOKE_ERR_ARG otherwise). Close with stoke_dataset_close. */
stoke_status stoke_dataset_from_arrays(const stoke_dataset_info *info, const void *inputs,
                                       const void *targets, bool copy, stoke_dataset **out);

/* Reads every sample of `src` into memory and returns a dataset over that copy (same
 * info, format "memory"); `src` stays open and owned by the caller. Errors are those of
 * the reads (file and sample index), or STOKE_ERR_NOMEM. */
stoke_status stoke_dataset_load(stoke_dataset *src, stoke_dataset **out);

/* A dataset of the first n samples of `src`, read through to it (borrowed: it must
 * outlive the prefix): what a --limit keeps when the samples must stay on storage, as
 * images read from their originals do. STOKE_ERR_ARG if n is outside [0, count]. Close
 * with stoke_dataset_close (src stays open). */
stoke_status stoke_dataset_prefix(stoke_dataset *src, int64_t n, stoke_dataset **out);

/* ---- Loader -------------------------------------------------------------------- */

typedef struct stoke_loader_opts {
    stoke_sampler_opts sampler;            /* batch size, shuffle, seed, drop_last, shard */
    stoke_sampler_state start;             /* where to start (zero: epoch 0, index 0) */
    const stoke_transform_opts *transform; /* NULL: inputs are copied as read */
    int workers;                           /* worker threads; 0: the consumer's thread does
                                         the work inside stoke_loader_next */
    int prefetch;                          /* ring slots (batches in flight); 0: 2*workers+2,
                                         at least 2 */
    bool use_device;                       /* copy batches to CUDA device `device` */
    int device;
    size_t memory_limit; /* > 0: a ring of more host bytes than this is
                                         refused (STOKE_ERR_NOMEM with the numbers)
                                         before anything is allocated */
    bool hold;           /* each batch stays valid, unchanged, until the caller gives
                                         it back with stoke_loader_release, however many
                                         batches it takes meanwhile (docs/loader.md) */
    int sample_delay_us; /* a test and benchmark knob, 0..1e6 (0: none, the default):
                            the thread that loads a sample (a worker, or the consumer
                            with 0 workers) then spins until it has used this much more
                            CPU time of its own, so each sample costs exactly that much
                            more CPU, as a slow decode would (docs/loader.md) */
} stoke_loader_opts;

/* The ring slots a loader with these options has (prefetch, else 2 x workers + 2, at
 * least 2): its host memory is slots x batch x (input + target + 8) bytes. */
int stoke_loader_slots(const stoke_loader_opts *o);

/* One batch. Its memory belongs to the loader and stays valid until the next call of
 * stoke_loader_next (device memory: see docs/loader.md), or with opts.hold until
 * stoke_loader_release(held). A size of 0 marks the end of an epoch. */
typedef struct stoke_batch {
    int64_t epoch;
    int64_t index;           /* batch number within the epoch */
    int64_t size;            /* samples in this batch; 0 at the end of an epoch */
    const int64_t *samples;  /* the dataset indices of its samples */
    void *inputs;            /* size x input_shape of input_dtype: on the device when
                                on_device, else host (pinned where CUDA allows) */
    void *targets;           /* size x the dataset's target bytes, or NULL */
    const void *host_inputs; /* the same batch in the host slot */
    const void *host_targets;
    stoke_shape input_shape; /* of one sample */
    stoke_dtype input_dtype;
    size_t input_bytes;  /* of one sample */
    size_t target_bytes; /* of one sample */
    bool on_device;
    void *event; /* on_device: a cudaEvent_t recorded after the copy; make
                                the compute stream wait on it (or stoke_loader_wait)
                                before the next call of stoke_loader_next, which may
                                record it again */
    void *held;  /* opts.hold: what stoke_loader_release takes back; NULL for an
                                end-of-epoch marker and without hold */
    /* the consumer's wait for this batch inside stoke_loader_next (a timed call's
     * slices included): what wait_avg_ms averages */
    double wait_ms;
} stoke_batch;

typedef struct stoke_loader stoke_loader;

/* Starts the loader over `d` (borrowed: it must outlive the loader) with its worker
 * threads and its ring of slots, allocated once. With use_device, slots are pinned and
 * each batch is copied to the device on the loader's own stream; when the CUDA runtime
 * cannot be used the loader falls back to host batches and stoke_loader_device_reason
 * says why. STOKE_ERR_ARG for bad options, STOKE_ERR_NOMEM, STOKE_ERR_SYSTEM if a
 * thread cannot start. */
stoke_status stoke_loader_create(stoke_dataset *d, const stoke_loader_opts *o, stoke_loader **out);

/* The next batch in sampler order, the same bytes whatever the number of workers.
 * A dataset error (file, sample index, what was wrong) is returned as the error of the
 * batch holding that sample, after every earlier batch was delivered; the workers are
 * then stopped and every later call returns the same error. */
stoke_status stoke_loader_next(stoke_loader *l, stoke_batch *b);

/* Like stoke_loader_next, but waits at most timeout_s seconds for the batch: if it is
 * not ready by then, returns STOKE_ERR_TIMEOUT with nothing handed out, and the next
 * call goes on waiting for the same batch (a caller that must react to signals, such
 * as Python's Ctrl-C, waits in slices). The wait statistics count the whole wait. */
stoke_status stoke_loader_next_timed(stoke_loader *l, stoke_batch *b, double timeout_s);

/* opts.hold: gives a batch's memory back to the loader (b->held of a batch it handed
 * out; NULL is fine). Until then the batch's host and device memory stay as they
 * were: the loader fills other buffers, allocating one more set whenever every one it
 * has is held. Device memory given back is reused only by copies that wait on the
 * consumer event (stoke_loader_set_consumer_event), so record that event after the
 * kernels that read it. Thread-safe; each batch once. */
void stoke_loader_release(stoke_loader *l, void *held);

/* Makes the CUDA stream `stream` (a cudaStream_t; 0x1 and 0x2 are CUDA's legacy and
 * per-thread default streams) wait for a device batch's copy, without blocking the
 * host: call it before the next stoke_loader_next. A no-op for host batches. */
stoke_status stoke_loader_stream_wait(stoke_loader *l, const stoke_batch *b, void *stream);

/* For device batches when the caller's kernels read them asynchronously: `event` is a
 * cudaEvent_t the caller records on its compute stream after the last kernel that
 * reads the batch it holds, before calling stoke_loader_next again. Before the loader
 * next overwrites that batch's device memory, its copy stream waits on the event
 * (cudaStreamWaitEvent), so the copy cannot overtake those kernels. NULL (the
 * default) means the caller synchronizes its stream before stoke_loader_next. A no-op
 * for host batches. */
void stoke_loader_set_consumer_event(stoke_loader *l, void *event);

/* Blocks until a device batch's copy has finished (cudaEventSynchronize); a no-op for
 * host batches. */
stoke_status stoke_loader_wait(stoke_loader *l, const stoke_batch *b);

/* The sampler position after the last batch handed out: give it as opts.start to a
 * new loader to resume with the following batch. */
stoke_sampler_state stoke_loader_state(const stoke_loader *l);

bool stoke_loader_on_device(const stoke_loader *l);
/* Why batches are not on a device ("no device requested", "cudaGetDeviceCount: ...
 * (error 35)"), or "" when they are. Never NULL. */
const char *stoke_loader_device_reason(const stoke_loader *l);

/* Instrumentation, measured on every batch. Times in milliseconds. */
typedef struct stoke_loader_stats {
    int64_t batches; /* handed out, end-of-epoch markers excluded */
    int64_t samples;
    double wait_avg_ms; /* the consumer's wait inside stoke_loader_next */
    double wait_p95_ms; /*   (p95 over the last 1024 batches) */
    double wait_max_ms;
    double fill_avg; /* batches ready in the ring when the consumer asked */
    int fill_min, fill_max;
    int slots; /* ring size */
    int workers;
    double busy_avg_ms;   /* a worker's time per batch spent reading and
                                  transforming (all workers' busy time / batches) */
    double busy_p95_ms;   /* p95 of one batch's production time (the workers' time on
                                  its samples), over the last 1024 batches produced */
    double busy_frac[64]; /* each worker's busy time / wall time since create
                                  (first 64 workers) */
    double elapsed_s;     /* since create */
    int held;             /* opts.hold: batches handed out and not yet released */
    int buffers;          /* opts.hold: batch buffers beyond the ring's (held, or
                                  free for the next hand-out) */
} stoke_loader_stats;

/* Thread-safe: may run on another thread (the monitor's sampler) while the consumer
 * calls stoke_loader_next. */
void stoke_loader_get_stats(stoke_loader *l, stoke_loader_stats *s);

/* The consumer's per-batch waits (stoke_batch.wait_ms) counted into fixed log-spaced
 * buckets: edges 0, then 1-2-5 steps from 0.001 ms to 10000 ms. counts[i] holds the
 * waits in [edges[i], edges[i+1]); the last, counts[STOKE_WAIT_EDGES - 1], those of at
 * least 10000 ms. Adding is a search over 23 edges and an increment: no allocation, so
 * the training loop adds every batch. */
enum { STOKE_WAIT_EDGES = 23 };
typedef struct stoke_wait_hist {
    int64_t counts[STOKE_WAIT_EDGES];
    int64_t batches; /* = the sum of counts */
    double max_ms;
} stoke_wait_hist;

/* The bucket edges in milliseconds (STOKE_WAIT_EDGES of them, ascending, 0 first). */
const double *stoke_wait_hist_edges(void);
/* Adds one wait; a negative or NaN wait counts as 0. */
void stoke_wait_hist_add(stoke_wait_hist *h, double wait_ms);
/* The q-quantile (0..1), interpolated linearly within its bucket (the overflow bucket
 * reaches to max_ms) and never above max_ms; NaN with no batch. */
double stoke_wait_hist_quantile(const stoke_wait_hist *h, double q);

/* A stoke_mon_pipeline_fn (stoke/monitor.h) over a stoke_loader (ctx): how a program
 * that runs the monitor lets it carry the loader's wait, fill and worker figures. Runs
 * on the monitor's sampler thread (stoke_loader_get_stats is thread-safe). With 0
 * workers the busy fraction is the consumer's own time spent loading. False if ctx is
 * NULL. The monitor's struct is only named here, so data does not include monitor. */
struct stoke_mon_pipeline;
bool stoke_loader_pipeline(void *loader, struct stoke_mon_pipeline *out);

/* Stops the workers (joining every thread) and frees nothing: batches handed out
 * stay valid (with opts.hold, until released or destroyed). Every later
 * stoke_loader_next fails with "loader: stopped". For a caller that drops a loader
 * while it may still hold its batches. */
void stoke_loader_stop(stoke_loader *l);

/* Stops the workers (joining every thread) and frees everything; NULL is fine. */
void stoke_loader_destroy(stoke_loader *l);

#ifdef __cplusplus
}
#endif
#endif
