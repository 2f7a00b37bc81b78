/* fuzz_safetensors.c - the safetensors reader on arbitrary bytes (the buffer is the
 * whole file), and the training checkpoint's metadata readers on what it accepts: they
 * must accept or refuse with a message, never crash or read past the end, and what
 * they accept must keep the promises stoke_ckpt_open and train_meta_read make. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "stoke/train.h"
#include "train/train_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stoke_ckpt *c;
    if (stoke_ckpt_open_memory(data, size, "fuzz.safetensors", &c) != STOKE_OK)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i < stoke_ckpt_count(c); i++) {
        const stoke_ckpt_tensor *t = stoke_ckpt_tensor_at(c, i);
        if (t->ndim < 0 || t->ndim > STOKE_MAX_DIMS || stoke_ckpt_find(c, t->name) != t)
            abort();
        /* Touch every byte: ASan catches any tensor pointing outside the file. */
        const volatile unsigned char *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++)
            (void)p[k];
        total += t->nbytes;
    }
    if (total > size)
        abort(); /* tensors must tile the data without overlaps */
    for (size_t i = 0; i < stoke_ckpt_meta_count(c); i++)
        if (stoke_ckpt_meta(c, stoke_ckpt_meta_at(c, i)->key) == NULL)
            abort();
    /* what --resume, eval and predict read from the metadata: the stoke.* table with
     * its ranges, stoke.config (an object of values) and stoke.config_bytes (hex) */
    train_meta m;
    if (train_meta_read(c, &m) == STOKE_OK && (m.step < 0 || m.sampler_index < 0))
        abort();
    struct cJSON *o;
    if (train_ckpt_config(c, &o) == STOKE_OK)
        cJSON_Delete(o);
    char buf[64];
    if (train_ckpt_config_bytes(c, "dataset", buf, sizeof buf) == 1 &&
        strlen(buf) >= sizeof buf)
        abort();
    stoke_ckpt_close(c);
    return 0;
}
