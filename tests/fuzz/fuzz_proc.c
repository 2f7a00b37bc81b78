/* fuzz_proc.c - the monitor's /proc/PID/stat, /proc/PID/io and /proc/PID/environ
 * parsers on arbitrary bytes (a process may be renamed to anything, and its name sits
 * inside stat; its environment is whatever its parent gave it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "monitor/proc_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    stat_fields f;
    unsigned long long rd, wr;
    stoke_proc_parse_stat(text, &f);
    stoke_proc_parse_io(text, &rd, &wr);
    int rank;
    stoke_proc_parse_environ_rank((const char *)data, size, &rank);
    free(text);
    return 0;
}
