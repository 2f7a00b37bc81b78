/* fuzz_safetensors.c - the safetensors reader on arbitrary bytes (the buffer is the
 * whole file): it must accept or refuse with a message, never crash or read past the
 * end, and what it accepts must keep the promises stoke_ckpt_open makes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stoke/train.h"

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
    stoke_ckpt_close(c);
    return 0;
}
