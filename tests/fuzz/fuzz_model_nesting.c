/* fuzz_model_nesting.c - the model-file parser and builder on deeply nested documents:
 * a small input is a template that expands into thousands of levels, which must be
 * refused with a message naming the file (or parse and build), never crash or hang.
 *
 * Why fuzz_model_yaml did not find issue 9 (1), 10,000 nested residual blocks
 * overflowing the stack: under this build (ASan) the parser overflowed at about 5,400
 * blocks, 28 bytes each at the least ("[{type: residual, layers: " ... "}]"), so 150 KB;
 * libFuzzer never makes an input longer than -max_len, which defaults to the largest
 * seed or 4096 bytes (146 blocks), and -len_control keeps it near 600 bytes over a
 * 20 s run. It also only parsed: the builder, which overflowed first in the release
 * build, never ran. Raising -max_len to megabytes would slow every other input; here
 * the depth is a number in the input instead.
 *
 * Input: depth (2 bytes, little-endian), flags (1 byte: bit 0 block style, bits 1-3 the
 * indent per level less 1), then prefix, open, core, close and suffix separated by 0
 * bytes. The text is prefix + open x depth + core + close x depth + suffix; in block
 * style each new line of level i's open (i from 1, the core at depth + 1) is indented
 * by i x indent spaces. The text is capped at 1 MB. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stoke/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_TEXT (1u << 20)

typedef struct text {
    char *buf;
    size_t len;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->len + n > MAX_TEXT)
        n = MAX_TEXT - t->len;
    memcpy(t->buf + t->len, s, n);
    t->len += n;
}

/* `s` with every line after a newline indented by `indent` spaces. */
static void put_indented(text *t, const char *s, size_t n, size_t indent)
{
    char spaces[64];
    memset(spaces, ' ', sizeof spaces);
    for (size_t i = 0; i < n; i++) {
        put(t, s + i, 1);
        for (size_t k = s[i] == '\n' ? indent : 0; k > 0;) {
            size_t w = k < sizeof spaces ? k : sizeof spaces;
            put(t, spaces, w);
            k -= w;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    unsigned depth = data[0] | (unsigned)data[1] << 8;
    bool block = data[2] & 1;
    size_t indent = 1 + (data[2] >> 1 & 7);
    const char *part[5] = {"", "", "", "", ""};
    size_t plen[5] = {0};
    const char *p = (const char *)data + 3, *end = (const char *)data + size;
    for (int i = 0; i < 5 && p <= end; i++) {
        const char *z = memchr(p, '\0', (size_t)(end - p));
        part[i] = p;
        plen[i] = (size_t)((z ? z : end) - p);
        p += plen[i] + 1;
    }
    text t = {malloc(MAX_TEXT), 0};
    if (!t.buf)
        return 0;
    put(&t, part[0], plen[0]);
    for (unsigned i = 0; i < depth && t.len < MAX_TEXT; i++)
        put_indented(&t, part[1], plen[1], block ? indent * (i + 1) : 0);
    put_indented(&t, part[2], plen[2], block ? indent * (depth + 1) : 0);
    for (unsigned i = 0; i < depth && t.len < MAX_TEXT; i++)
        put(&t, part[3], plen[3]);
    put(&t, part[4], plen[4]);

    stoke_model_file *mf;
    if (stoke_model_file_parse(t.buf, t.len, "fuzz.yaml", &mf) != STOKE_OK) {
        if (strncmp(stoke_last_error(), "fuzz.yaml", 9) != 0)
            abort(); /* every refusal names the file */
        free(t.buf);
        return 0;
    }
    free(t.buf);
    /* The builder recurses over the blocks as the parser does: it must hold too. */
    stoke_shape in = {1, {8}}, none = {0};
    stoke_graph *g = stoke_model_file_build(mf, &in, STOKE_TARGET_CLASS, &none, 3);
    if (!g && strncmp(stoke_last_error(), "fuzz.yaml", 9) != 0)
        abort();
    stoke_graph_free(g);
    stoke_model_file_free(mf);
    return 0;
}
