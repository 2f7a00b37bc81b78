/* cmd_data.c - `stoke data info` (count, shapes, dtypes, class balance of a dataset)
 * and `stoke data convert` (any supported format to stoke packed records); `stoke data
 * bench` is cmd_data_bench.c. */
#include "core/json.h"
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoke/data.h"

#define CMD "data"

static bool parse_size(const char *v, void *dest)
{
    stoke_dataset_opts *o = dest;
    int h = 0, w = 0, used = 0;
    if (sscanf(v, "%dx%d%n", &h, &w, &used) != 2 || v[used] || h < 1 || w < 1 || h > 65535 ||
        w > 65535)
        return false;
    o->image_height = h;
    o->image_width = w;
    return true;
}

#define O(f) offsetof(stoke_dataset_opts, f)
const cli_opt cli_data_opts[] = {
    {.name = "split",
     .type = CLI_TEXT,
     .off = O(split),
     .arg = "S",
     .help = "IDX directories: train (default) or test; image folders: the\nsubfolder holding "
             "the class folders (PATH/S/<class>/...)"},
    {.name = "targets",
     .type = CLI_TEXT,
     .off = O(targets_path),
     .arg = "F",
     .help = "NPY: the targets file (default: derived from the inputs file's\nname, x.npy -> "
             "y.npy, X_train.npy -> y_train.npy, ...)"},
    {.name = "input-name",
     .type = CLI_TEXT,
     .off = O(input_name),
     .arg = "N",
     .help = "HDF5: the dataset of inputs (default: inputs, x, X, data,\nfeatures)"},
    {.name = "target-name",
     .type = CLI_TEXT,
     .off = O(target_name),
     .arg = "N",
     .help = "HDF5: the dataset of targets (default: targets, y, Y, labels)"},
    {.name = "size",
     .type = CLI_CUSTOM,
     .arg = "HxW",
     .parse = parse_size,
     .want = "takes HxW, e.g. 224x224",
     .help = "image folders: resize every image to H x W (default 224x224)"},
    {.name = "channels",
     .type = CLI_CHOICE,
     .off = O(image_channels),
     .arg = "C",
     .choices = " 1 3 ",
     .values = (const int[]){1, 3},
     .help = "image folders: 1 (gray) or 3 (RGB, default)"},
    {.name = "regression",
     .type = CLI_SWITCH,
     .off = O(regression),
     .help = "float targets are regression values, even if whole numbers"},
    {0}};
#undef O

/* convert's own option, into its stoke_records_store */
static const cli_opt convert_opts[] = {
    {.name = "store",
     .type = CLI_CHOICE,
     .arg = "S",
     .choices = " pixels jpeg ",
     .values = (const int[]){STOKE_STORE_PIXELS, STOKE_STORE_JPEG},
     .help = "convert: pixels (default: every sample decoded and resized,\nfixed-size records) "
             "or jpeg (image folders: each file's own\nbytes, several times smaller, decoded at "
             "--size on every read)"},
    {0}};

/* info's own option, into its bool */
static const cli_opt info_opts[] = {
    {.name = "json", .type = CLI_SWITCH, .help = "info: print one JSON document"}, {0}};

void cmd_data_usage(void)
{
    cli_print_usage("usage: stoke data info PATH [OPTIONS]", 18,
                    (const cli_opt *[]){info_opts, NULL}, NULL);
    cli_print_usage("       stoke data convert SRC DST [OPTIONS]", 18,
                    (const cli_opt *[]){convert_opts, NULL}, NULL);
    cli_data_bench_synopsis("       stoke data bench PATH [OPTIONS]", 18);
    puts("\n"
         "info     prints a dataset's sample count, input shape and dtype, target kind,\n"
         "         shape and dtype, and for class targets the number of classes and the\n"
         "         count and share of each class.\n"
         "convert  writes every sample of SRC as a stoke packed-records file DST (the\n"
         "         fastest format to read), through a temporary file renamed into place:\n"
         "         a failure never leaves a partial DST and leaves an existing DST intact.\n"
         "bench    runs the loader alone, as `stoke train` would on PATH, for each worker\n"
         "         count: samples/s, per-batch wait, worker busy share, the best count\n"
         "         (all its options: stoke data bench --help).\n"
         "\n"
         "PATH / SRC may be an IDX directory or file (plain or .gz), an NPY file, an HDF5\n"
         "file, a folder of class subfolders of images, or a packed-records file; the\n"
         "format is recognised from the contents.");
    cli_print_options(cli_data_opts, 16);
    cli_print_options(convert_opts, 16);
    cli_print_options(info_opts, 16);
    puts("Exit: 0 success, 1 the dataset cannot be read or written (the message names the\n"
         "file and what was wrong), 2 a usage error, 130 / 143 convert interrupted by\n"
         "SIGINT / SIGTERM (DST as it was, no temporary file). Fields and formats:\n"
         "docs/data.md, docs/formats.md.");
}

static cJSON *shape_json(const stoke_shape *s)
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < s->ndim; k++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->dims[k]));
    return a;
}

/* What `info` says about an image dataset beyond its header: the sizes on disk, and
 * whether the size it is read at was given. */
typedef struct image_note {
    bool known;
    stoke_image_sizes sizes;
    bool size_given; /* --size; else the default */
} image_note;

/* Sizes from an even sample of this many images: a folder of a million files is not
 * read whole for a summary. */
#define INFO_SIZE_SAMPLE 1000

static void print_json(const char *path, const stoke_dataset *d, const int64_t *counts,
                       const image_note *img)
{
    const stoke_dataset_info *f = stoke_dataset_get_info(d);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "path", path);
    cJSON_AddStringToObject(root, "format", f->format);
    double stored = 0;
    const char *enc = stoke_records_encoding(d, &stored);
    if (enc) {
        cJSON_AddStringToObject(root, "encoding", enc);
        cJSON_AddNumberToObject(root, "stored_bytes_per_sample", stored);
    }
    cJSON_AddNumberToObject(root, "count", (double)f->count);
    cJSON *in = cJSON_AddObjectToObject(root, "input");
    cJSON_AddItemToObject(in, "shape", shape_json(&f->input_shape));
    cJSON_AddStringToObject(in, "dtype", stoke_dtype_name(f->input_dtype));
    cJSON_AddNumberToObject(in, "bytes", (double)f->input_bytes);
    if (img->known) {
        cJSON_AddStringToObject(in, "size_from", img->size_given ? "--size" : "default");
        cJSON *disk = cJSON_AddObjectToObject(root, "on_disk");
        cJSON *w = cJSON_AddArrayToObject(disk, "width");
        cJSON_AddItemToArray(w, cJSON_CreateNumber(img->sizes.min_width));
        cJSON_AddItemToArray(w, cJSON_CreateNumber(img->sizes.max_width));
        cJSON *h = cJSON_AddArrayToObject(disk, "height");
        cJSON_AddItemToArray(h, cJSON_CreateNumber(img->sizes.min_height));
        cJSON_AddItemToArray(h, cJSON_CreateNumber(img->sizes.max_height));
        cJSON_AddNumberToObject(disk, "images_read", (double)img->sizes.read);
    }
    cJSON *t = cJSON_AddObjectToObject(root, "target");
    cJSON_AddStringToObject(t, "kind", stoke_target_kind_name(f->target_kind));
    if (f->target_kind != STOKE_TARGET_NONE) {
        cJSON_AddItemToObject(t, "shape", shape_json(&f->target_shape));
        cJSON_AddStringToObject(t, "dtype", stoke_dtype_name(f->target_dtype));
        cJSON_AddNumberToObject(t, "bytes", (double)f->target_bytes);
    }
    cJSON_AddNumberToObject(root, "num_classes", (double)f->num_classes);
    const char *ex;
    int64_t skipped = stoke_dataset_skipped(d, &ex);
    if (skipped > 0) {
        cJSON *sk = cJSON_AddObjectToObject(root, "skipped");
        cJSON_AddNumberToObject(sk, "count", (double)skipped);
        cJSON_AddStringToObject(sk, "example", ex);
    }
    if (counts) {
        cJSON *bal = cJSON_AddArrayToObject(root, "class_balance");
        for (int64_t c = 0; c < f->num_classes; c++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "class", (double)c);
            const char *name = stoke_dataset_class_name(d, c);
            if (name)
                cJSON_AddStringToObject(o, "name", name);
            cJSON_AddNumberToObject(o, "count", (double)counts[c]);
            cJSON_AddNumberToObject(o, "percent",
                                    f->count ? 100.0 * (double)counts[c] / (double)f->count : 0);
            cJSON_AddItemToArray(bal, o);
        }
    }
    char *s = stoke_json_print(root, true);
    if (s)
        puts(s);
    free(s);
    cJSON_Delete(root);
}

static void print_human(const char *path, const stoke_dataset *d, const int64_t *counts,
                        const image_note *img)
{
    const stoke_dataset_info *f = stoke_dataset_get_info(d);
    char shape[160];
    printf("path         %s\n", path);
    printf("format       %s\n", f->format);
    double stored = 0;
    const char *enc = stoke_records_encoding(d, &stored);
    if (enc && !strcmp(enc, "jpeg"))
        printf("encoding     jpeg: image file bytes, %.0f bytes per sample on average, decoded "
               "on read\n",
               stored);
    else if (enc)
        printf("encoding     pixels: %.0f bytes per sample, as read\n", stored);
    printf("samples      %" PRId64 "\n", f->count);
    printf("input        %s %s, %zu byte%s per sample",
           stoke_shape_format(&f->input_shape, shape, sizeof shape),
           stoke_dtype_name(f->input_dtype), f->input_bytes, f->input_bytes == 1 ? "" : "s");
    /* the shape of an image folder is the size it is read at, not the images' own */
    if (img->known)
        printf(", as read: every image resized to %" PRId64 "x%" PRId64 " (%s)",
               f->input_shape.dims[0], f->input_shape.dims[1],
               img->size_given ? "HxW, --size" : "HxW, the --size default");
    printf("\n");
    if (img->known) {
        const stoke_image_sizes *z = &img->sizes;
        char read[64];
        if (z->read == f->count)
            snprintf(read, sizeof read, "all %" PRId64 " images", z->read);
        else
            snprintf(read, sizeof read, "%" PRId64 " of %" PRId64 " images sampled", z->read,
                     f->count);
        printf("on disk      %d to %d px wide, %d to %d px high (%s)\n", z->min_width, z->max_width,
               z->min_height, z->max_height, read);
    }
    if (f->target_kind == STOKE_TARGET_NONE)
        printf("target       none\n");
    else
        printf("target       %s %s %s, %zu byte%s per sample\n",
               stoke_target_kind_name(f->target_kind),
               stoke_shape_format(&f->target_shape, shape, sizeof shape),
               stoke_dtype_name(f->target_dtype), f->target_bytes, f->target_bytes == 1 ? "" : "s");
    if (f->target_kind == STOKE_TARGET_CLASS)
        printf("classes      %" PRId64 "\n", f->num_classes);
    const char *ex;
    int64_t skipped = stoke_dataset_skipped(d, &ex);
    if (skipped > 0)
        printf("skipped      %" PRId64 " (symbolic links out of their class folder, files and "
               "folders reached twice), e.g. %s\n",
               skipped, ex);
    if (!counts)
        return;
    bool named = stoke_dataset_class_name(d, 0) != NULL;
    printf("class balance\n  %8s %12s %8s%s\n", "class", "samples", "%", named ? "  name" : "");
    for (int64_t c = 0; c < f->num_classes; c++) {
        printf("  %8" PRId64 " %12" PRId64 " %8.2f", c, counts[c],
               f->count ? 100.0 * (double)counts[c] / (double)f->count : 0.0);
        const char *name = stoke_dataset_class_name(d, c);
        printf("%s%s\n", name ? "  " : "", name ? name : "");
    }
}

typedef struct progress_ctx {
    bool tty;
    int last_quarter; /* plain output: the last 25% step printed */
    uint64_t t0;
} progress_ctx;

static void on_progress(void *arg, int64_t done, int64_t total)
{
    progress_ctx *p = arg;
    double frac = total ? (double)done / (double)total : 1.0;
    if (p->tty) {
        char bar[41];
        int full = (int)(frac * 40);
        for (int i = 0; i < 40; i++)
            bar[i] = i < full ? '#' : '-';
        bar[40] = '\0';
        double s = (double)(stoke_now_ns() - p->t0) * 1e-9;
        printf("\r[%s] %3.0f%% %" PRId64 "/%" PRId64 " samples %.0f/s\033[K", bar, frac * 100, done,
               total, s > 0 ? (double)done / s : 0.0);
        fflush(stdout);
        return;
    }
    /* Not a terminal (a log, CI): a line when a quarter is crossed, at most five. The
     * writer reports whole chunks of samples, so a line can come well past the quarter
     * it crosses: it says the share actually done, the same figure as its counts. */
    int q = (int)(frac * 4);
    if (q > p->last_quarter) {
        printf("converting: %" PRId64 "/%" PRId64 " samples (%" PRId64 "%%)\n", done, total,
               total ? done * 100 / total : 100);
        fflush(stdout);
        p->last_quarter = q;
    }
}

/* The dataset options and the subcommand's own (into `own`), the positional arguments
 * into pos (all max_pos of them), and the dataset pos[0] opened. Returns -1 when all is
 * well, else the exit code. */
static int parse_open(int argc, char **argv, const char *sub, stoke_dataset_opts *o,
                      const cli_opt *own_opts, void *own, const char **pos, int max_pos,
                      stoke_dataset **d)
{
    cli_group groups[] = {{cli_data_opts, o}, {own_opts, own}};
    cli_spec s = {.cmd = CMD,
                  .sub = sub,
                  .usage = cmd_data_usage,
                  .groups = groups,
                  .ngroups = 2,
                  .dash_is_arg = true,
                  .pos = pos,
                  .max_pos = max_pos};
    int rc = cli_parse(&s, argc, argv, 2);
    if (rc >= 0)
        return rc;
    if (s.npos < max_pos)
        return cli_usage_error(CMD, "%s needs %s", sub, max_pos == 1 ? "a PATH" : "SRC and DST");
    return cli_data_open(pos[0], o, d);
}

int cli_check_dataset_options(const char *cmd, const char *path, stoke_dataset *d,
                              const stoke_dataset_opts *given)
{
    const char *f = stoke_dataset_get_info(d)->format;
    bool images = !strcmp(f, "images"), idx = !strcmp(f, "idx");
    struct stat st;
    bool idx_dir = idx && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    const char *opt = NULL, *applies = NULL;
    if (given->split && !images && !idx_dir)
        opt = "--split", applies = "IDX directories and image folders";
    else if (given->targets_path && strcmp(f, "npy"))
        opt = "--targets", applies = "NPY files";
    else if ((given->input_name || given->target_name) && strcmp(f, "hdf5"))
        opt = given->input_name ? "--input-name" : "--target-name", applies = "HDF5 files";
    else if ((given->image_height || given->image_width || given->image_channels) && !images)
        opt = given->image_channels ? "--channels" : "--size", applies = "image folders";
    if (!opt)
        return -1;
    return cli_usage_error(cmd, "%s applies to %s; %s is %s%s", opt, applies, path, f,
                           idx && !idx_dir ? " (a single file)" : "");
}

void cli_warn_skipped(const char *cmd, const char *path, const stoke_dataset *d)
{
    const char *ex;
    int64_t k = stoke_dataset_skipped(d, &ex);
    if (k > 0)
        fprintf(stderr, "stoke %s: warning: %s: %" PRId64 " entr%s left out, e.g. %s\n", cmd, path,
                k, k == 1 ? "y" : "ies", ex);
}

int cli_data_open(const char *path, const stoke_dataset_opts *o, stoke_dataset **d)
{
    stoke_status s = stoke_dataset_open(path, o, d);
    if (s == STOKE_OK) {
        int rc = cli_check_dataset_options(CMD, path, *d, o);
        if (rc >= 0) {
            stoke_dataset_close(*d);
            *d = NULL;
        }
        if (rc < 0)
            cli_warn_skipped(CMD, path, *d);
        return rc;
    }
    if (s == STOKE_ERR_ARG)
        return cli_usage_error(CMD, "%s", stoke_last_error());
    return cli_error(CMD, "%s", stoke_last_error());
}

static int data_info(int argc, char **argv)
{
    stoke_dataset_opts o = {0};
    bool json = false;
    const char *pos[1];
    stoke_dataset *d;
    int rc = parse_open(argc, argv, "info", &o, info_opts, &json, pos, 1, &d);
    if (rc >= 0)
        return rc;
    const stoke_dataset_info *f = stoke_dataset_get_info(d);
    int64_t *counts = NULL;
    if (f->target_kind == STOKE_TARGET_CLASS && f->num_classes > 0) {
        counts = calloc((size_t)f->num_classes, sizeof *counts);
        if (!counts || stoke_dataset_class_counts(d, counts) != STOKE_OK) {
            rc = cli_error(CMD, "%s", counts ? stoke_last_error() : "out of memory");
            free(counts);
            stoke_dataset_close(d);
            return rc;
        }
    }
    image_note img = {.size_given = o.image_height || o.image_width};
    if (!strcmp(f->format, "images")) {
        if (stoke_dataset_image_sizes(d, INFO_SIZE_SAMPLE, &img.sizes) != STOKE_OK) {
            rc = cli_error(CMD, "%s", stoke_last_error());
            free(counts);
            stoke_dataset_close(d);
            return rc;
        }
        img.known = true;
    }
    if (json)
        print_json(pos[0], d, counts, &img);
    else
        print_human(pos[0], d, counts, &img);
    free(counts);
    stoke_dataset_close(d);
    return 0;
}

static int data_convert(int argc, char **argv)
{
    stoke_dataset_opts o = {0};
    const char *pos[2];
    int store = STOKE_STORE_PIXELS;
    stoke_dataset *d;
    int rc = parse_open(argc, argv, "convert", &o, convert_opts, &store, pos, 2, &d);
    if (rc >= 0)
        return rc;
    const char *format = stoke_dataset_get_info(d)->format;
    if (store == STOKE_STORE_JPEG && strcmp(format, "images")) {
        rc =
            cli_usage_error(CMD, "--store jpeg applies to image folders; %s is %s", pos[0], format);
        stoke_dataset_close(d);
        return rc;
    }
    progress_ctx p = {.tty = isatty(STDOUT_FILENO), .last_quarter = -1, .t0 = stoke_now_ns()};
    stoke_status s = stoke_records_write_as(d, pos[1], store, on_progress, &p);
    double secs = (double)(stoke_now_ns() - p.t0) * 1e-9;
    int64_t count = stoke_dataset_get_info(d)->count;
    stoke_dataset_close(d);
    if (p.tty)
        printf("\n");
    if (s != STOKE_OK)
        return cli_error(CMD, "%s", stoke_last_error());
    struct stat st = {0};
    char bytes[32];
    stoke_format_bytes(stat(pos[1], &st) == 0 ? (double)st.st_size : 0, bytes, sizeof bytes);
    printf("wrote %" PRId64 " samples, %s (%lld bytes), to %s in %.2f s: %.0f samples/s\n", count,
           bytes, (long long)st.st_size, pos[1], secs, secs > 0 ? (double)count / secs : 0.0);
    return 0;
}

int cmd_data(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error(CMD, "needs a subcommand: info, convert or bench");
    if (cli_is_help(argv[1])) {
        cmd_data_usage();
        return 0;
    }
    if (strcmp(argv[1], "info") == 0)
        return data_info(argc, argv);
    if (strcmp(argv[1], "convert") == 0)
        return data_convert(argc, argv);
    if (strcmp(argv[1], "bench") == 0)
        return cmd_data_bench(argc, argv);
    return cli_usage_error(CMD, "unknown subcommand '%s' (info, convert or bench)", argv[1]);
}
