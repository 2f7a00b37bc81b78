/* fuzz_train_config.c - the `--config` settings parser (a YAML mapping of key: value,
 * each value checked by stoke_train_config_set) on arbitrary bytes: it must accept or
 * refuse with a message naming the file, never crash, hang or leak, and an accepted
 * configuration still serializes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stoke/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stoke_train_config c;
    stoke_train_config_defaults(&c);
    if (stoke_train_config_parse(&c, (const char *)data, size, "fuzz.yaml") != STOKE_OK) {
        if (strncmp(stoke_last_error(), "fuzz.yaml", 9) != 0)
            abort(); /* every refusal names the file */
        return 0;
    }
    char *json = stoke_train_config_json(&c);
    if (!json)
        abort();
    free(json);
    return 0;
}
