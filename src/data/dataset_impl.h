/* dataset_impl.h - what every dataset format provides: an open function that fills
 * the common header, and a table of read/close functions. */
#ifndef STOKE_DATASET_IMPL_H
#define STOKE_DATASET_IMPL_H

#include "data/decode.h"
#include "stoke/data.h"

typedef struct stoke_dataset_vt {
    /* Reads sample i (0 <= i < count, already checked) into input/target (target may
     * be NULL). Must be thread-safe. */
    stoke_status (*read)(stoke_dataset *d, int64_t i, void *input, void *target);
    /* Optional (image datasets): reads sample i's image from its original, the part
     * fn picks once the original's size is known, into input (the window's out
     * sizes x the dataset's channels, u8 HWC), and the target as read does. */
    stoke_status (*read_window)(stoke_dataset *d, int64_t i, stoke_image_window_fn fn, void *ctx,
                                void *input, void *target);
    void (*close)(stoke_dataset *d); /* frees d->impl; not d itself */
    /* Optional (NULL: stoke_dataset_class_counts reads every sample): fills
     * counts[0..num_classes) faster than reading every sample would. */
    stoke_status (*class_counts)(stoke_dataset *d, int64_t *counts);
    /* Optional (formats that name their classes): class c's name, c in range, or NULL. */
    const char *(*class_name)(const stoke_dataset *d, int64_t c);
    /* Optional (datasets of image files): sample i's image size as stored, in pixels,
     * from its header. */
    stoke_status (*original_size)(stoke_dataset *d, int64_t i, int *width, int *height);
    /* Optional (image folders): what opening left out (stoke_dataset_skipped). */
    int64_t (*skipped)(const stoke_dataset *d, const char **example);
} stoke_dataset_vt;

struct stoke_dataset {
    const stoke_dataset_vt *vt;
    stoke_dataset_info info;
    char path[1024]; /* for messages */
    void *impl;
};

/* Each format's opener; called by stoke_dataset_open after it recognised the format.
 * On success they fill d->vt, d->info (all fields, including input_bytes and
 * target_bytes) and d->impl. On failure they free what they allocated and leave a
 * message. */
stoke_status stoke_idx_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o);
stoke_status stoke_npy_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o);
stoke_status stoke_hdf5_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o);
stoke_status stoke_images_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o);
stoke_status stoke_records_open(stoke_dataset *d, const char *path, const stoke_dataset_opts *o);

/* Image folders: sample i's file as stored, for packed records that keep the bytes:
 * its bytes in *buf (free it) and *len, its path in *path (the dataset's), its channels
 * (1 or 3) in *channels, and its target into `target` (NULL: skipped). STOKE_ERR_ARG
 * if d is not an image folder; else the errors of reading the file. */
stoke_status stoke_images_raw(stoke_dataset *d, int64_t i, void *target, unsigned char **buf,
                              size_t *len, const char **path, int *channels);

/* Sniffers that need more than a file's first bytes: the HDF5 signature at offset 0,
 * 512, 1024 or 2048; a directory (or its opts->split) whose subdirectories hold
 * .jpg/.jpeg/.png files. */
bool stoke_hdf5_sniff(const char *path);
bool stoke_images_sniff(const char *path, const stoke_dataset_opts *o);

#endif
