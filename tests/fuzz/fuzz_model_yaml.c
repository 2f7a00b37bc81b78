/* fuzz_model_yaml.c - the YAML model-file parser on arbitrary bytes: it must accept or
 * refuse with a message naming the file, never crash, hang or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stoke/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stoke_model_file *mf;
    if (stoke_model_file_parse((const char *)data, size, "fuzz.yaml", &mf) != STOKE_OK) {
        if (strncmp(stoke_last_error(), "fuzz.yaml", 9) != 0)
            abort(); /* every refusal names the file */
        return 0;
    }
    if (!stoke_model_file_describe(mf)[0])
        abort();
    stoke_model_file_free(mf);
    return 0;
}
